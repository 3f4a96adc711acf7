"""Identity files: created once with owner-only permissions, one key behind both the peer id and
the announcement signature, and a clear error for a file that is not an identity."""

import logging
import os
import stat

import pytest
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.p2p import PeerID

from ftis.node.runner.folders import check_node_folders
from ftis.node.swarm.keys import mounts
from ftis.node.swarm.keys.identity import IdentityError, ensure_identity, peer_id_of_owner, signing_key


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
    with caplog.at_level(logging.WARNING, logger="ftis.node.swarm.keys.identity"):
        assert ensure_identity(path) == path
        assert not caplog.records  # 0400, as created
        os.chmod(path, 0o644)
        assert ensure_identity(path) == path  # used all the same: the peer id is the user's
    [record] = caplog.records
    assert "mode 644" in record.getMessage() and "chmod 400" in record.getMessage()


def _mountinfo(tmp_path, source: str) -> str:
    """A container's mountinfo (as podman wrote it) with ``tmp_path/identity`` mounted from ``source``."""
    point = str(tmp_path / "identity").replace(" ", "\\040")
    return (f"156 150 0:52 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
            f"157 156 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
            f"161 156 254:0 {source} {point} rw,nosuid,nodev,relatime - ext4 /dev/vda rw\n"
            f"163 156 254:0 /var/lib/docker/volumes/{'b' * 64}/_data {tmp_path}/runs rw - ext4 /dev/vda rw\n")


ANONYMOUS = "/var/lib/containers/storage/volumes/64855c8b96cf2c049de9d0108d6ac456ed75d387548edf2ed1f10146a165f769/_data"


@pytest.mark.parametrize("source, anonymous", [
    (ANONYMOUS, True),
    (f"/volumes/{'a' * 64}/_data", True),                           # the engine's folder on a partition of its own
    ("/var/lib/containers/storage/volumes/ftis-identity/_data", False),  # a named volume
    (f"/var/lib/docker/volumes/{'a' * 63}/_data", False),
    ("/srv/ftis/identity", False),                                   # a host folder
])
def test_an_anonymous_volume_is_told_from_a_named_one_or_a_host_folder(tmp_path, source, anonymous):
    mountinfo = _mountinfo(tmp_path, source)
    expected = str(tmp_path / "identity") if anonymous else None
    assert mounts.anonymous_volume(tmp_path / "identity", mountinfo) == expected
    assert mounts.anonymous_volume(tmp_path / "identity" / "sub", mountinfo) == expected
    assert mounts.anonymous_volume(tmp_path / "identity-other", mountinfo) is None  # a prefix is not a parent
    assert mounts.anonymous_volume(tmp_path, mountinfo) is None


def test_a_mount_point_with_a_space_is_read_as_mountinfo_escapes_it(tmp_path):
    spaced = tmp_path / "my data"
    mountinfo = _mountinfo(spaced, ANONYMOUS)
    assert "\\040" in mountinfo
    assert mounts.anonymous_volume(spaced / "identity", mountinfo) == str(spaced / "identity")


def test_a_new_identity_on_an_anonymous_volume_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    info = tmp_path / "mountinfo"
    info.write_text(_mountinfo(tmp_path, ANONYMOUS))
    monkeypatch.setattr(mounts, "MOUNTINFO", info)
    key = tmp_path / "identity" / "node.key"
    with pytest.raises(IdentityError, match=r"identity is an anonymous volume .* -v ftis-identity:.*identity"):
        ensure_identity(key)
    assert not (tmp_path / "identity").exists()
    with pytest.raises(IdentityError, match="anonymous volume"):
        check_node_folders(tmp_path / "runs" / "small", key)  # join says it before its warm start
    assert not (tmp_path / "runs").exists()
    # an existing key there is read (a restarted container keeps its anonymous volume); elsewhere keys are made
    info.write_text(_mountinfo(tmp_path, "/srv/ftis/identity"))
    made = ensure_identity(key)
    info.write_text(_mountinfo(tmp_path, ANONYMOUS))
    assert ensure_identity(key) == made
    assert ensure_identity(tmp_path / "elsewhere" / "node.key").exists()


def test_without_a_mountinfo_to_read_nothing_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(mounts, "MOUNTINFO", tmp_path / "absent")
    assert mounts.anonymous_volume(tmp_path) is None
    assert ensure_identity(tmp_path / "node.key").exists()


def test_processes_creating_one_identity_at_once_all_get_the_same_key(tmp_path):
    """A bootstrap and a health check (``ftis-node identity``) creating the same key at once: none fails, one
    key is kept, and no partial file is ever seen (the key is linked into place whole)."""
    import subprocess
    import sys

    key = tmp_path / "identity" / "bootstrap.key"
    script = ("import sys; from pathlib import Path; from ftis.node.swarm.keys.identity import ensure_identity;"
              "path = ensure_identity(Path(sys.argv[1])); print(path.read_bytes().hex())")
    for attempt in range(2):
        if key.exists():
            key.unlink()
        runs = [subprocess.Popen([sys.executable, "-c", script, str(key)], stdout=subprocess.PIPE, text=True)
                for _ in range(4)]
        keys = {run.communicate(timeout=120)[0].strip() for run in runs}
        assert all(run.returncode == 0 for run in runs), attempt
        assert keys == {key.read_bytes().hex()}, attempt
        assert stat.S_IMODE(key.stat().st_mode) == 0o400
        assert sorted(p.name for p in key.parent.iterdir()) == ["bootstrap.key"]  # no temporary file left


def test_an_identity_file_is_never_replaced_once_there(tmp_path, monkeypatch):
    from ftis.node.swarm.keys import identity as identity_module

    key = ensure_identity(tmp_path / "node.key")
    before = key.read_bytes()
    identity_module._create_identity(key)  # as a process that found no file a moment earlier would
    assert key.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["node.key"]


def test_without_hard_links_the_key_is_created_exclusively(tmp_path, monkeypatch):
    def no_links(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    key = ensure_identity(tmp_path / "node.key")
    before = key.read_bytes()
    assert stat.S_IMODE(key.stat().st_mode) == 0o400 and len(before) > 1000
    assert ensure_identity(key).read_bytes() == before
    from ftis.node.swarm.keys import identity as identity_module

    identity_module._create_identity(key)  # a second creator finds the file there and keeps it
    assert key.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["node.key"]
