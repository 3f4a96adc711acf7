"""Peer scores on a real swarm on 127.0.0.1: a peer that serves corrupt payloads is muted, its later
batches are refused as ``muted`` without being fetched, and ``ftis-node status --node DIR`` shows it.

Run: python -m pytest tests/test_reputation_hivemind.py -q      (marker ``hivemind``; about 20 s)

One swarm for the module: a bootstrap, a receiver whose mutes come quickly (two batches of evidence, a
score below 0.5), and a hostile peer (``helpers/hostile_peer.py``) that serves what each test scripts.
"""

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from helpers.hivemind_swarm import Peer, Swarm, start_bootstrap
from helpers.hostile_peer import HostilePeer, serves, tampered
from helpers.swarm import TOKENIZER
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.swarm.exchange.reasons import HASH_MISMATCH, MUTED
from ftis.node.swarm.peers.peer_view import PeerView, write_peer_view

pytestmark = pytest.mark.hivemind

RUN = "reputation-test"
SETTINGS = dict(run_id=RUN, host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2, announce_interval_s=1.0,
                announcement_ttl_s=30.0, max_age_s=60.0, fetch_timeout_s=3.0, fetch_retries=1,
                fetch_retry_backoff_s=0.5, per_peer_quota=64, max_buffered_batches=256)
QUICK_MUTES = dict(score_min_evidence=1.5, mute_below=0.5, mute_s=600.0)  # 2 refused batches: 1/3 < 0.5


@dataclass
class World:
    swarm: Swarm
    receiver: Peer
    hostile: HostilePeer


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    swarm = Swarm(start_bootstrap(tmp_path_factory.mktemp("swarm"), SETTINGS), SETTINGS)
    try:
        (receiver,) = swarm.join(1, **QUICK_MUTES)
        (rogue,) = swarm.join(1, polled=False)
        yield World(swarm, receiver, HostilePeer(rogue, TOKENIZER))
    finally:
        swarm.close()


def test_a_peer_serving_corrupt_payloads_is_muted_and_its_later_batches_are_not_fetched(world):
    receiver, hostile = world.receiver, world.hostile
    for refused in (1, 2):  # one at a time: both are fetched before the mute
        hostile.offer(tampered)
        world.swarm.wait_until(lambda n=refused: receiver.rejections(hostile.peer_id).get(HASH_MISMATCH) == n,
                               f"the receiver refuses corrupt batch {refused}")
    judged = receiver.transport.scores()[hostile.peer_id]
    assert judged.muted_until is not None and judged.score == pytest.approx(1 / 3, abs=0.01)
    round_ = hostile.offer(serves)  # a good batch now: the peer is muted all the same
    world.swarm.wait_until(lambda: receiver.rejections(hostile.peer_id).get(MUTED) == 1,
                           "the receiver refuses the muted peer's next batch")
    assert hostile.asked(receiver.peer_id, round_) == [] and round_ not in receiver.got(hostile.peer_id)


def test_status_with_the_nodes_folder_shows_its_scores_and_mutes(world, tmp_path):
    receiver, hostile = world.receiver, world.hostile
    world.swarm.wait_until(lambda: hostile.peer_id in receiver.transport.scores() and
                           receiver.transport.scores()[hostile.peer_id].muted_until is not None,
                           "the receiver mutes the hostile peer (the test before does it)")
    receiver.publish()  # the receiver announces too: a member the view has no score of
    write_peer_view(tmp_path, PeerView(time.time(), 3, receiver.transport.scores(), {}))
    command = ["status", "--peer", world.swarm.maddrs[0], "--run-id", RUN, "--node", str(tmp_path)]
    rows: dict[str, list[str]] = {}
    deadline = time.monotonic() + 60
    while receiver.peer_id not in rows and time.monotonic() < deadline:  # until the receiver's announcement is read
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 0, result.output
        rows = {line.split()[0]: re.split(r"\s{2,}", line) for line in result.output.splitlines()[3:]}
    score, muted, used = rows[hostile.peer_id][-3:]
    assert score == "0.33" and muted.endswith(" s more") and used == "-"  # its batches never reached a round
    assert rows[receiver.peer_id][-3:] == ["-", "-", "-"]
    result = CliRunner().invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    members = {m["peer_id"]: m for m in json.loads(result.output)}
    assert members[hostile.peer_id]["score"] == pytest.approx(1 / 3, abs=0.01)
    assert members[hostile.peer_id]["muted_until"] > time.time()
    assert members[receiver.peer_id]["score"] is None
