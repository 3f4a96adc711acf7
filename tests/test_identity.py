"""Identity files: created once with owner-only permissions, one key behind both the peer id and
the announcement signature, and a clear error for a file that is not an identity."""

import logging
import os
import stat

import pytest
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.p2p import PeerID

from ftis.node.swarm.identity import IdentityError, ensure_identity, peer_id_of_owner, signing_key


def test_identity_file_is_created_once_with_owner_only_permissions(tmp_path):
    path = ensure_identity(tmp_path / "keys" / "node.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    before = path.read_bytes()
    assert ensure_identity(path) == path
    assert path.read_bytes() == before  # never regenerated


def test_the_signing_key_proves_the_peer_id(tmp_path):
    path = ensure_identity(tmp_path / "node.key")
    owner = RSASignatureValidator(signing_key(path)).local_public_key
    assert peer_id_of_owner(owner) == PeerID.from_identity(path.read_bytes()).to_base58()


def test_two_identities_have_different_peer_ids(tmp_path):
    owners = [RSASignatureValidator(signing_key(ensure_identity(tmp_path / name))).local_public_key
              for name in ("a.key", "b.key")]
    assert peer_id_of_owner(owners[0]) != peer_id_of_owner(owners[1])


def test_a_file_that_is_not_an_identity_is_refused(tmp_path):
    path = tmp_path / "garbage.key"
    path.write_bytes(b"\x00not a key")
    with pytest.raises(IdentityError, match=r"garbage\.key"):
        signing_key(path)
    with pytest.raises(IdentityError, match="cannot read"):
        signing_key(tmp_path / "missing.key")
    with pytest.raises(IdentityError, match="not a file"):
        ensure_identity(tmp_path)


@pytest.mark.parametrize("owner", [b"ssh-rsa AAAA", b"[owner:not a key]", b"[owner:ssh-rsa !!!]"])
def test_a_subkey_without_a_valid_owner_key_proves_nothing(owner):
    with pytest.raises(IdentityError):
        peer_id_of_owner(owner)


def test_a_non_rsa_owner_key_proves_nothing():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    ssh = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    with pytest.raises(IdentityError, match="not an RSA public key"):
        peer_id_of_owner(b"[owner:" + ssh + b"]")


def test_an_existing_identity_readable_by_others_is_used_with_a_warning(tmp_path, caplog):
    path = ensure_identity(tmp_path / "node.key")
    with caplog.at_level(logging.WARNING, logger="ftis.node.swarm.identity"):
        assert ensure_identity(path) == path
        assert not caplog.records  # 0400, as created
        os.chmod(path, 0o644)
        assert ensure_identity(path) == path  # used all the same: the peer id is the user's
    [record] = caplog.records
    assert "mode 644" in record.getMessage() and "chmod 400" in record.getMessage()
