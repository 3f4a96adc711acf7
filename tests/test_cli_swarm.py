"""The swarm commands on 127.0.0.1 (marker ``hivemind``): ``ftis-node bootstrap`` as a subprocess of the
installed entry point, as a user runs it, and ``ftis-node status`` through typer's runner in this process.

Run: python -m pytest tests/test_cli_swarm.py -q

A new process imports hivemind and with it torch (seconds; far more on a loaded machine), so the
bootstrap's two runs (same identity file) make one test, and status runs in-process.
"""

import contextlib
import json
import os
import socket
import stat
import time
from collections.abc import Iterator

import psutil
import pytest
from helpers.cli_process import CliProcess
from helpers.swarm import TOKENIZER, make_batch
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.swarm.errors import SwarmError
from ftis.node.swarm.reach.listen_ports import check_listen_ports

pytestmark = pytest.mark.hivemind

RUN = "cli-test"
runner = CliRunner()


def _running(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after ``timeout`` (a zombie has exited: it runs nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.status() != psutil.STATUS_ZOMBIE:
                    left.append(process)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _names(processes: list[psutil.Process]) -> set[str]:
    names = set()
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            names.add(process.name())
    return names


def test_bootstrap_prints_its_address_keeps_its_identity_and_stops_cleanly_on_sigterm(tmp_path):
    identity = tmp_path / "keys" / "bootstrap.key"
    peer_ids = []
    bounds = tmp_path / "relay.toml"  # the second run sets its relay's bounds in a config file
    bounds.write_text("[swarm]\nrelay_max_reservations = 7\nrelay_data_limit_bytes = 65536\n")
    for run in ("created", "reused"):
        config = ("--config", str(bounds)) if run == "reused" else ()
        bootstrap = CliProcess("bootstrap", "--host-maddrs", "/ip4/127.0.0.1/tcp/0", "--identity", str(identity),
                               "--run-id", RUN, *config)
        try:
            maddr = bootstrap.maddr()
            assert maddr.startswith("/ip4/127.0.0.1/tcp/") and "/p2p/Qm" in maddr, maddr
            peer_ids.append(maddr.rsplit("/p2p/", 1)[1])
            family = psutil.Process(bootstrap.process.pid).children(recursive=True)
            assert "p2pd" in _names(family), f"{run} run: no p2pd among {family}"
            status, output = bootstrap.terminate()
        finally:
            if bootstrap.process.poll() is None:
                bootstrap.process.kill()
        assert status == 0, f"{run} run:\n{output}"
        assert "stopped" in output
        assert "Traceback" not in output
        relay = "at most 7 slots, 8 relayed connections at once per peer, 64 KiB each way and 1800 s" if config \
            else "at most 128 slots, 8 relayed connections at once per peer, 1024 MiB each way and 1800 s"
        assert relay in output, output
        assert "p2pd's built-in relay may answer in its place (128 KiB each way" in output, output
        assert _running(family, timeout=10) == [], f"{run} run left processes running"
        assert stat.S_IMODE(os.stat(identity).st_mode) == 0o400  # owner-only, read-only
    assert peer_ids[0] == peer_ids[1]


# --- status (in-process: the command's whole code path, without a second torch import) ---------------


@pytest.fixture(scope="module")
def member(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A bootstrap DHT peer and one member that has published and announced; yields the bootstrap's
    multiaddr and the member's peer id."""
    from hivemind.utils import get_dht_time

    from ftis.node.config import SwarmConfig
    from ftis.node.swarm.dht.directory import read_members
    from ftis.node.swarm.dht.transport import HivemindTransport, start_dht

    settings = dict(run_id=RUN, host_maddrs=["/ip4/127.0.0.1/tcp/0"], announce_interval_s=1.0, announcement_ttl_s=30.0)
    bootstrap, _ = start_dht(SwarmConfig(**settings), tmp_path_factory.mktemp("status") / "bootstrap.key",
                             announce=False)
    transport = None
    try:
        maddr = str(bootstrap.get_visible_maddrs()[0])
        transport = HivemindTransport(SwarmConfig(**settings, initial_peers=[maddr]), TOKENIZER)
        transport.publish(make_batch(transport.peer_id, 0, get_dht_time(), run_id=RUN, model="cli-model",
                                     adapter="lora", policy_version=7))
        deadline = time.monotonic() + 30
        while transport.peer_id not in {m.peer_id
                                        for m in read_members(bootstrap, RUN, SwarmConfig().shards).members}:
            assert time.monotonic() < deadline, "the member's announcement never reached the bootstrap"
            time.sleep(0.1)
        yield maddr, transport.peer_id
    finally:
        if transport is not None:
            transport.close()
        bootstrap.shutdown()


def test_status_json_lists_a_running_member_with_its_model_and_policy_version(member):
    maddr, peer_id = member
    result = runner.invoke(app, ["status", "--peer", maddr, "--run-id", RUN, "--json"])
    assert result.exit_code == 0, result.output
    members = {m["peer_id"]: m for m in json.loads(result.stdout)}
    assert set(members) == {peer_id}  # the bootstrap does not announce; the status client neither
    found = members[peer_id]
    assert (found["model"], found["adapter"], found["policy_version"]) == ("cli-model", "lora", 7)
    assert (found["tokenizer"], found["published_batches"]) == (TOKENIZER, 1)
    assert found["published_tokens"] > 0


def test_status_table_prints_the_members_peer_id(member):
    maddr, peer_id = member
    result = runner.invoke(app, ["status", "--peer", maddr, "--run-id", RUN])
    assert result.exit_code == 0, result.output
    assert f"run {RUN!r}: 1 member" in result.stdout
    (row,) = [line for line in result.stdout.splitlines() if peer_id in line]
    assert row.split()[:4] == [peer_id, "cli-model", "lora", "7"]
    assert "read all 4 shards of the run" in result.stdout  # the run's directory, as this client read it


def test_status_with_a_bad_peer_address_exits_with_an_error_line():
    result = runner.invoke(app, ["status", "--peer", "not-a-multiaddr", "--run-id", RUN])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)  # a clean exit, no exception escaping
    assert "Traceback" not in result.output
    assert any(line.startswith("error: ") and "not-a-multiaddr" in line for line in result.stderr.splitlines()), \
        result.stderr


def test_status_whose_read_gets_no_answer_exits_with_an_error_line(member, monkeypatch):
    from ftis.node.swarm.dht import directory

    def unanswered(*_: object, **__: object) -> None:
        raise TimeoutError  # what read_members raises when the DHT does not answer within its limit

    monkeypatch.setattr(directory, "read_members", unanswered)
    maddr, _ = member
    result = runner.invoke(app, ["status", "--peer", maddr, "--run-id", RUN])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "error: the swarm's DHT did not answer within 60 s; try again" in result.stderr, result.output


def test_bootstrap_on_a_taken_port_says_so_at_once_and_writes_nothing(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        key = tmp_path / "keys" / "bootstrap.key"
        started = time.monotonic()
        result = runner.invoke(app, ["bootstrap", "--host-maddrs", f"/ip4/127.0.0.1/tcp/{port}",
                                     "--identity", str(key)])
        seconds = time.monotonic() - started
    assert result.exit_code == 1, result.output
    assert f"cannot listen on /ip4/127.0.0.1/tcp/{port}: port {port} is taken" in result.output
    assert seconds < 10  # before p2pd's start-up, not after its timeout
    assert not (tmp_path / "keys").exists()  # no identity created for a node that never started


def test_a_listen_address_not_of_this_machine_is_refused_with_the_fix():
    with pytest.raises(SwarmError, match=r"not an address of this machine.*--announce-maddrs"):
        check_listen_ports(["/ip4/192.0.2.7/tcp/31337"])
    check_listen_ports(["/ip4/127.0.0.1/tcp/0", "/ip4/0.0.0.0/udp/31337/quic", "/dns4/example.org/tcp/1"])
