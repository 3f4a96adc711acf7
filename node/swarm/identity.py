"""A node's identity: one private-key file that fixes both its libp2p peer id and the RSA key that
signs its DHT announcements, so a restarted node keeps its peer id *and* its announcement subkey.

The file is hivemind's own identity format (a libp2p protobuf holding an RSA private key), created
on first use with owner-only permissions. Without a file, a node gets a fresh identity per run.
"""

import hashlib
import logging
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hivemind.p2p import P2P, PeerID
from hivemind.proto import crypto_pb2
from hivemind.utils.crypto import RSAPrivateKey

from ftis.node.errors import UserError

logger = logging.getLogger(__name__)
_SHA256_MULTIHASH = bytes([0x12, 0x20])  # multihash prefix: sha2-256, 32 bytes


class IdentityError(UserError, ValueError):
    """An identity file that cannot be created or read."""


def ensure_identity(path: Path) -> Path:
    """Create the identity file at ``path`` if it does not exist (mode 0400, folder 0700 if new)."""
    path = Path(path).expanduser()
    if path.exists():
        if not path.is_file():
            raise IdentityError(f"{path}: not a file")
        loose = path.stat().st_mode & 0o077
        if loose:
            logger.warning("%s can be read or written by others (mode %o): whoever reads it can sign as this "
                           "node; run chmod 400 on it", path, path.stat().st_mode & 0o777)
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        P2P.generate_identity(str(path))  # writes the key, then chmod 0400
    except OSError as error:
        raise IdentityError(f"{path}: cannot create the identity file ({error.strerror})") from None
    os.chmod(path, 0o400)
    return path


def signing_key(path: Path) -> RSAPrivateKey:
    """The RSA private key inside an identity file, as hivemind's signature validator uses it."""
    try:
        message = crypto_pb2.PrivateKey.FromString(Path(path).read_bytes())
    except OSError as error:
        raise IdentityError(f"{path}: cannot read ({error.strerror})") from None
    except Exception as error:  # protobuf raises DecodeError, which has no public import path
        raise IdentityError(f"{path}: not an identity file ({error})") from None
    if message.key_type != crypto_pb2.KeyType.RSA:
        raise IdentityError(f"{path}: holds a {crypto_pb2.KeyType.Name(message.key_type)} key, expected RSA")
    key = RSAPrivateKey.__new__(RSAPrivateKey)
    try:
        key.__setstate__({"_private_key": message.data})  # hivemind's own unpickling path: DER bytes
    except ValueError as error:
        raise IdentityError(f"{path}: the RSA key does not load ({error})") from None
    return key


def peer_id_of_owner(owner: bytes) -> str:
    """The libp2p peer id (base58) of the RSA key in a signed subkey ``[owner:ssh-rsa …]``.

    A peer's announcement subkey and its peer id come from the same identity key, so a receiver can
    check that an announcement about peer X was signed by X, and fetch only from X.
    """
    if not (owner.startswith(b"[owner:") and owner.endswith(b"]")):
        raise IdentityError("not an owner marker")
    try:
        public_key = serialization.load_ssh_public_key(owner[len(b"[owner:") : -1])
    except Exception as error:  # ValueError, UnsupportedAlgorithm...: any way a peer's bytes can fail
        raise IdentityError(f"not an RSA public key ({error})") from None
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise IdentityError(f"not an RSA public key ({type(public_key).__name__})")
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    encoded = crypto_pb2.PublicKey(key_type=crypto_pb2.KeyType.RSA, data=der).SerializeToString()
    return PeerID(_SHA256_MULTIHASH + hashlib.sha256(encoded).digest()).to_base58()
