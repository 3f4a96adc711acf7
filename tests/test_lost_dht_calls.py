"""A call that hivemind's DHT process never answers, or drops, costs a node one failed poll or announcement.

hivemind runs the DHT in a process of its own and answers each call through a future; a call whose task that
process destroys is answered with ``GeneratorExit``, or not at all, and hivemind's own blocking calls have no time
limit. Real hivemind on 127.0.0.1: two transports and a bootstrap peer; a test replaces one transport's DHT store,
its directory read or its p2pd address query by one that never answers (or answers ``GeneratorExit``) and shows
that the node counts the failure, goes on, and exchanges again once the DHT answers; the bootstrap's periodic
line says so and goes on.
"""

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from helpers.hivemind_swarm import Swarm, start_bootstrap
from hivemind.utils.mpfuture import MPFuture

from ftis.node.config import SwarmConfig
from ftis.node.swarm.bootstrap import run_bootstrap
from ftis.node.swarm.dht import announce as hivemind_announce
from ftis.node.swarm.dht import calls as dht_calls
from ftis.node.swarm.dht import directory
from ftis.node.swarm.dht import fetch as hivemind_fetch
from ftis.node.swarm.dht import transport as hivemind_transport
from ftis.node.swarm.errors import SwarmError

pytestmark = pytest.mark.hivemind

SETTINGS = dict(run_id="lost-calls", host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2,
                announce_interval_s=0.5, announcement_ttl_s=30.0, max_age_s=60.0, fetch_timeout_s=5.0,
                per_peer_quota=64, max_buffered_batches=256)
CALL_TIMEOUT_S = 0.5  # the node's limit on one DHT call, shortened from a minute for the test


@pytest.fixture(scope="module")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Swarm]:
    swarm = Swarm(start_bootstrap(tmp_path_factory.mktemp("lost-calls"), SETTINGS), SETTINGS)
    try:
        swarm.join(2)
        yield swarm
    finally:
        swarm.close()


@pytest.fixture
def short_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dht_calls, "_DHT_CALL_TIMEOUT_S", CALL_TIMEOUT_S)
    monkeypatch.setattr(hivemind_announce, "_IDENTIFY_TIMEOUT_S", CALL_TIMEOUT_S)


def never_answered(*_: object, **__: object) -> MPFuture:
    return MPFuture()  # made on the network thread's loop, so it can be awaited there; nothing ever sets it


def dropped(*_: object, **__: object) -> MPFuture:
    future = MPFuture()
    future.set_exception(GeneratorExit())  # what hivemind's _run_coroutine sends when its task is destroyed
    return future


def exchanged(swarm: Swarm, sender, receiver) -> None:
    """A new batch of ``sender`` reaches ``receiver``."""
    batch = sender.publish()
    swarm.wait_until(lambda: batch.round in receiver.got(sender.peer_id),
                     f"{sender.peer_id}'s round {batch.round} reaches {receiver.peer_id}")


@pytest.mark.parametrize("answer", [never_answered, dropped], ids=["never-answered", "dropped"])
def test_a_lost_store_fails_that_announcement_and_the_next_ones_go_out(swarm, short_limits, monkeypatch, answer):
    alice, bob = swarm.nodes
    exchanged(swarm, alice, bob)
    failures = alice.transport.stats().announce_failures
    monkeypatch.setattr(alice.transport._dht, "store", answer)
    alice.publish()
    swarm.wait_until(lambda: alice.transport.stats().announce_failures >= failures + 2,
                     "two of alice's announcements fail")
    monkeypatch.undo()
    exchanged(swarm, alice, bob)  # the announcer lives on: a new batch is announced and fetched


@pytest.mark.parametrize("answer", [never_answered, dropped], ids=["never-answered", "dropped"])
def test_a_lost_read_fails_that_poll_and_the_next_ones_read(swarm, short_limits, monkeypatch, answer):
    alice, bob = swarm.nodes
    exchanged(swarm, alice, bob)
    failures = bob.transport.stats().poll_failures
    monkeypatch.setattr(hivemind_fetch, "read_shards", answer)
    swarm.wait_until(lambda: bob.transport.stats().poll_failures >= failures + 2, "two of bob's polls fail")
    monkeypatch.undo()
    exchanged(swarm, alice, bob)  # the poller lives on: bob reads alice's new announcement


def test_calls_left_unanswered_are_not_kept(swarm, short_limits, monkeypatch):
    carol = swarm.join(1, polled=False)[0]
    failures = carol.transport.stats().poll_failures
    monkeypatch.setattr(hivemind_fetch, "read_shards", never_answered)
    swarm.wait_until(lambda: carol.transport.stats().poll_failures >= failures + 4, "four of carol's polls fail")
    assert len(carol.transport._dht_calls.pending) <= 1  # the one in flight, at most: not one per lost call
    carol.transport.close()


def test_the_addresses_come_within_a_time_limit_when_p2pd_does_not_answer(swarm, short_limits, monkeypatch):
    alice = swarm.nodes[0]
    known = alice.transport.visible_maddrs
    assert known and all(address.startswith("/ip4/127.0.0.1/tcp/") for address in known)
    stalled = threading.Event()

    async def never(*_: object, **__: object) -> list:
        stalled.set()
        await asyncio.Event().wait()
        return []

    monkeypatch.setattr(alice.transport._p2p, "get_visible_maddrs", never)
    started = time.monotonic()
    assert alice.transport.visible_maddrs == known  # the last addresses read
    assert stalled.is_set() and time.monotonic() - started < CALL_TIMEOUT_S + 3.0


def test_the_bootstraps_periodic_line_says_when_the_dht_does_not_answer_and_goes_on(monkeypatch):
    def lost(*_: object, **__: object) -> None:
        raise TimeoutError

    monkeypatch.setattr(directory, "read_members", lost)
    lines: list[str] = []
    give_up = time.monotonic() + 60
    config = SwarmConfig(run_id="lost-calls-bootstrap", host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    run_bootstrap(config, log_interval_s=0.2, echo=lines.append,
                  stop=lambda: sum("did not answer" in line for line in lines) >= 2 or time.monotonic() > give_up)
    assert sum("the DHT did not answer within 30 s (TimeoutError)" in line for line in lines) >= 2, lines


def test_a_bootstrap_whose_dht_does_not_say_its_id_fails_with_a_swarm_error(monkeypatch):
    def lost(*_: object, **__: object) -> str:
        raise TimeoutError

    monkeypatch.setattr(hivemind_transport, "peer_id_of", lost)
    config = SwarmConfig(run_id="lost-calls-bootstrap", host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    with pytest.raises(SwarmError, match="the DHT process did not say its peer id and addresses within 30 s"):
        run_bootstrap(config, log_interval_s=1.0, echo=lambda _: None)
