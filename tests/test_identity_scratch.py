"""A node without an identity file gets a fresh key for the run, written only while its DHT starts: nothing
of it stays on disk while the node runs, so a node killed outright leaves no private key behind.

Run: python -m pytest tests/test_identity_scratch.py -q      (marker ``hivemind``; a few seconds)
"""

import tempfile

import pytest

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.transport import HivemindTransport

pytestmark = pytest.mark.hivemind


def test_a_fresh_identity_is_gone_from_disk_once_the_node_has_started(tmp_path, monkeypatch):
    made, real = [], tempfile.mkdtemp

    def mkdtemp(*args, prefix: str | None = None, **kwargs) -> str:
        if not (prefix or "").startswith("ftis-identity-"):  # multiprocessing's own, say
            return real(*args, prefix=prefix, **kwargs)
        made.append(tmp_path / f"{prefix}{len(made)}")
        made[-1].mkdir()
        return str(made[-1])

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    transport = HivemindTransport(SwarmConfig(run_id="scratch-test", host_maddrs=["/ip4/127.0.0.1/tcp/0"]), "tok")
    try:
        assert len(made) == 1 and not made[0].exists()  # written, read by p2pd and the signer, removed
        assert transport.peer_id  # and the node runs on
    finally:
        transport.close()
