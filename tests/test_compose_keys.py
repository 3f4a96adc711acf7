"""Private keys stay in their own container: in ``docker/compose.yaml`` each service mounts only its own
identity volume, and the bootstrap hands its nodes its address through a public file, in a volume they mount
read-only (``ftis-node identity --publish``, tested here too: written whole, refreshed from the key at every
start, never the key itself, never over a key).

Run: python -m pytest tests/test_compose_keys.py -q
"""

import os
import re
from pathlib import Path, PurePosixPath

import pytest
import yaml
from typer.testing import CliRunner

from ftis.node.cli import app

ROOT = Path(__file__).resolve().parent.parent
IDENTITY = PurePosixPath("/data/identity")  # where the images keep key files (docker/README.md)


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]


def mounts(service: dict) -> list[tuple[str, PurePosixPath, bool]]:
    """(volume, mount point, read-only) of each of a service's volumes, from compose's short syntax."""
    found = []
    for volume in service.get("volumes", []):
        source, target, *mode = volume.split(":")
        found.append((source, PurePosixPath(target), "ro" in ",".join(mode).split(",")))
    return found


def shell_texts(service: dict) -> str:
    """Everything the service runs: its command, entrypoint and health check."""
    words = [*service.get("command", []), *service.get("entrypoint", []),
             *service.get("healthcheck", {}).get("test", [])]
    return "\n".join(words)


def key_files(text: str) -> set[str]:
    return set(re.findall(r"/data/identity/[\w.-]+", text))


def test_each_service_mounts_only_its_own_identity_volume_and_key(services):
    owners: dict[str, list[str]] = {}  # volume -> the services that mount it at the identity folder
    for name, service in services.items():
        for volume, target, _ in mounts(service):
            if target == IDENTITY:
                owners.setdefault(volume, []).append(name)
    assert owners and all(len(names) == 1 for names in owners.values()), owners
    identity_volumes = set(owners)
    for name, service in services.items():
        mine = [volume for volume, target, _ in mounts(service) if target == IDENTITY]
        assert len(mine) == 1, (name, mine)
        others = {volume for volume, _, _ in mounts(service)} & identity_volumes - set(mine)
        assert not others, f"{name} mounts another service's identity volume: {others}"
        own_key = service["command"][service["command"].index("--identity") + 1]
        read = key_files(shell_texts(service))
        assert read == {own_key}, f"{name} names key files {read}, its own is {own_key}"


def test_nodes_read_the_bootstrap_address_from_a_public_volume_mounted_read_only(services):
    bootstrap = services["bootstrap"]
    publishing = [(volume, target) for volume, target, read_only in mounts(bootstrap)
                  if target != IDENTITY and not read_only]
    published = re.findall(r"--publish (\S+)", shell_texts(bootstrap))
    assert len(published) == 1, published
    (public_volume, public_folder), = [(volume, target) for volume, target in publishing
                                       if target in PurePosixPath(published[0]).parents]
    for name, service in services.items():
        if name == "bootstrap":
            continue
        public = [(target, read_only) for volume, target, read_only in mounts(service) if volume == public_volume]
        assert public == [(public_folder, True)], f"{name} must mount {public_volume} read-only: {public}"
        assert f"--peer \"$$(cat {published[0]})\"" in shell_texts(service), name
    health = "\n".join(bootstrap["healthcheck"]["test"])
    assert f"$$(cat {published[0]})" in health and not key_files(health)  # it creates no key


# --- ftis-node identity --publish ----------------------------------------------------------------------------


def publish(key: Path, public: Path) -> object:
    return CliRunner().invoke(app, ["identity", str(key), "--maddr", "/ip4/10.0.0.1/tcp/31337",
                                    "--publish", str(public)])


def test_publish_writes_the_address_whole_and_refreshes_it_from_the_key(tmp_path):
    key, public = tmp_path / "identity" / "bootstrap.key", tmp_path / "public" / "bootstrap.maddr"
    first = publish(key, public)
    assert first.exit_code == 0, first.output
    address = first.output.strip()
    assert re.fullmatch(r"/ip4/10\.0\.0\.1/tcp/31337/p2p/Qm\w{44}", address)
    assert public.read_text() == address + "\n"  # the address alone: nothing of the key
    assert public.stat().st_mode & 0o444 == 0o444  # others read it
    key_bytes = key.read_bytes()
    public.write_text("/ip4/10.0.0.9/tcp/1/p2p/QmStale\n")  # a stale address, e.g. from another key
    again = publish(key, public)
    assert again.exit_code == 0 and public.read_text() == address + "\n"
    assert key.read_bytes() == key_bytes and sorted(p.name for p in public.parent.iterdir()) == ["bootstrap.maddr"]


def test_publish_leaves_the_old_address_whole_when_it_cannot_finish(tmp_path, monkeypatch):
    key, public = tmp_path / "bootstrap.key", tmp_path / "public" / "bootstrap.maddr"
    assert publish(key, public).exit_code == 0
    old = public.read_text()
    public.write_text(old.replace("10.0.0.1", "10.0.0.2"))
    before = public.read_text()

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)  # the last step: the new file in place of the old
    failed = publish(key, public)
    assert failed.exit_code == 1 and "cannot write the public address" in failed.output, failed.output
    assert public.read_text() == before  # the old one, whole
    assert sorted(p.name for p in public.parent.iterdir()) == ["bootstrap.maddr"]  # no partial file left


def test_publish_never_writes_over_a_key(tmp_path):
    key, other = tmp_path / "bootstrap.key", tmp_path / "small.key"
    for path in (key, other):
        assert CliRunner().invoke(app, ["identity", str(path)]).exit_code == 0
    kept = {path: path.read_bytes() for path in (key, other)}
    for target in (key, other):  # its own key file, or another's
        refused = publish(key, target)
        assert refused.exit_code == 1 and "holds an identity key" in refused.output, refused.output
    assert {path: path.read_bytes() for path in (key, other)} == kept
