"""A node's identity: one private-key file that fixes both its libp2p peer id and the RSA key that
signs its DHT announcements, so a restarted node keeps its peer id *and* its announcement subkey.

The file is hivemind's own identity format (a libp2p protobuf holding an RSA private key), created
on first use with owner-only permissions. Without a file, a node gets a fresh identity per run.

What others need of it is public: the peer id, or the full multiaddr peers join with, which
``publish_address`` writes to a file of its own (a bootstrap's, in a volume its nodes mount read-only),
so no container ever needs another's key file to learn its address.
"""

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hivemind.p2p import PeerID
from hivemind.proto import crypto_pb2
from hivemind.utils.crypto import RSAPrivateKey

from ftis.node.atomic import write_atomic
from ftis.node.errors import UserError
from ftis.node.swarm.keys.mounts import anonymous_volume

logger = logging.getLogger(__name__)
_SHA256_MULTIHASH = bytes([0x12, 0x20])  # multihash prefix: sha2-256, 32 bytes


class IdentityError(UserError, ValueError):
    """An identity file that cannot be created or read."""


def ensure_identity(path: Path) -> Path:
    """Create the identity file at ``path`` if it does not exist (mode 0400, folder 0700 if new).

    The file appears whole or not at all, and two processes creating it at once (a bootstrap and a health
    check reading its address, in a container) end with one key that both use."""
    path = Path(path).expanduser()
    if not path.exists():
        check_identity_kept(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _create_identity(path)
        except OSError as error:
            raise IdentityError(f"{path}: cannot create the identity file ({error.strerror})") from None
    if not path.is_file():
        raise IdentityError(f"{path}: not a file")
    if path.stat().st_mode & 0o077:
        logger.warning("%s can be read or written by others (mode %o): whoever reads it can sign as this "
                       "node; run chmod 400 on it", path, path.stat().st_mode & 0o777)
    return path


def _create_identity(path: Path) -> None:
    """A new RSA key in hivemind's identity format, written to a private temporary file beside ``path`` and
    linked to ``path`` only if no file is there yet: a key someone else made in the meantime is kept."""
    key = crypto_pb2.PrivateKey(key_type=crypto_pb2.KeyType.RSA, data=RSAPrivateKey().to_bytes())
    data = key.SerializeToString()
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o400)
        try:
            os.link(temporary, path)  # never replaces: the first key made wins
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: an exclusive create, which also never replaces
            _create_exclusive(path, data)
    finally:
        os.unlink(temporary)


def _create_exclusive(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` unless a file is there already (a reader may see it before it is whole)."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    except FileExistsError:
        return
    with os.fdopen(handle, "wb") as file:
        file.write(data)


def check_identity_kept(path: Path) -> None:
    """Refuse to create an identity file on an anonymous container volume, where it would not outlive the
    container (an existing file is read wherever it is: a restarted container keeps its anonymous volume)."""
    volume = anonymous_volume(path.expanduser().resolve().parent)
    if volume is not None:
        raise IdentityError(
            f"{path}: {volume} is an anonymous volume (the container was started without a volume for it): an "
            f"identity made there is lost with the container, and the node would come back with a new peer id. "
            f"Give it a named volume or a host folder, e.g. docker run -v ftis-identity:{volume} ...")


def publish_address(path: Path, address: str) -> Path:
    """Write ``address`` (a peer id or a full multiaddr: nothing secret) to ``path``, replaced whole each time,
    so a reader sees the last address or the new one, never part of one. A file there that holds an identity
    key is never replaced: a public file given the key's path by mistake would destroy the key."""
    path = Path(path).expanduser()
    if path.is_file() and _holds_key(path):
        raise IdentityError(f"{path}: holds an identity key; the public address goes to a file of its own")
    try:
        return write_atomic(path, address + "\n")
    except OSError as error:
        raise IdentityError(f"{path}: cannot write the public address ({error.strerror})") from None


def _holds_key(path: Path) -> bool:
    try:
        signing_key(path)
    except IdentityError:
        return False
    return True


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
