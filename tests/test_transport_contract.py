"""Contract tests of the ``Transport`` interface: what every implementation must do, written once and
run against each implementation in ``IMPLEMENTATIONS``.

Run: python -m pytest tests/test_transport_contract.py -q

The ``swarm`` fixture yields a ``SwarmHarness``: ``swarm.peers(n)`` makes n connected transports in one
run with one tokenizer, ``swarm.join(name, tokenizer=...)`` adds one more, and ``swarm.settle(receivers,
predicate)`` calls ``receive()`` on each receiver until what they got satisfies the predicate or a
deadline passes. Time is the harness's too: ``swarm.now()`` and ``swarm.advance(s)`` (a fake clock for
the memory transport; for a network one, the real clock shifted on, so nothing sleeps).

Negative checks never wait for something not to happen: a test publishes the batch that must not
arrive, then a marker batch after it, settles until the marker arrives, and only then asserts that the
other did not. That keeps them fast on a real network too. The marker must come from the same peer
(one announcement lists both); for another peer's batch, settle until its rejection is counted.

To add an implementation, write a context manager like ``memory_swarm`` (it gets the test's pytest
request, for module fixtures) and add one entry to ``IMPLEMENTATIONS``. ``lockstep_swarm`` is the
experiment's ``LockstepTransport`` with a barrier of one party (its publish waits for no one here).
``hivemind_swarm`` runs a real swarm on 127.0.0.1 (marker ``hivemind``; one bootstrap DHT peer for
the module, a run of its own per test, peers joining in parallel, short intervals); ``-m "not
hivemind"`` leaves it out.
"""

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from helpers.swarm import RUN_ID, TOKENIZER, FakeClock, ShiftedClock, make_batch

from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.swarm.transport import ReceivedBatch, Transport
from ftis.protocol import RolloutBatch, encode, read

Received = dict[str, list[ReceivedBatch]]  # receiver's peer id -> what it got, in order


# --- the harness ------------------------------------------------------------------------------------


@dataclass
class SwarmHarness:
    """Connected transports of one implementation, and the time they live in."""

    # (name, tokenizer=TOKENIZER, other_tokenizers=True, max_bytes=LIMITS.max_bytes) -> a new transport
    join: Callable[..., Transport]
    run_id: str  # the run its transports are in
    now: Callable[[], float]  # unix seconds, as the transports' clocks read it
    advance: Callable[[float], None]  # let that much time pass
    max_age_s: float  # the transports' InboxLimits.max_age_s
    poll_interval_s: float  # between rounds of receive() in settle
    timeout_s: float  # settle's default deadline
    quiet_s: float  # how long to keep polling to see that nothing more arrives (a few poll periods)

    def peers(self, n: int) -> list[Transport]:
        # joined together: a network transport takes a while to start (a DHT peer: about a second)
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(self.join, [f"peer-{i}" for i in range(n)]))

    def settle(self, receivers: list[Transport], predicate: Callable[[Received], bool],
               timeout: float | None = None) -> Received:
        """Everything ``receivers`` got, polling until ``predicate`` holds or ``timeout`` passes
        (always at least one round of ``receive()``)."""
        got: Received = {t.peer_id: [] for t in receivers}
        deadline = time.monotonic() + (self.timeout_s if timeout is None else timeout)
        while True:
            for t in receivers:
                got[t.peer_id] += t.receive()
            if predicate(got) or time.monotonic() >= deadline:
                return got
            time.sleep(self.poll_interval_s)


LIMITS = InboxLimits(max_age_s=60.0, per_peer_quota=64, max_batches=256, max_bytes=64 << 20)


@contextmanager
def memory_swarm(_request: pytest.FixtureRequest, lockstep: bool = False) -> Iterator[SwarmHarness]:
    hub, clock, transports = MemoryHub(), FakeClock(), []

    def join(name: str, tokenizer: str = TOKENIZER, other_tokenizers: bool = True,
             max_bytes: int = LIMITS.max_bytes) -> Transport:
        limits = replace(LIMITS, other_tokenizers=other_tokenizers, max_bytes=max_bytes)
        if lockstep:  # imports the node (torch): only when this implementation runs
            from ftis.node.experiment.lockstep import LockstepTransport

            transports.append(LockstepTransport(threading.Barrier(1), hub, RUN_ID, name, tokenizer, limits,
                                                clock=clock))
        else:
            transports.append(MemoryTransport(hub, RUN_ID, name, tokenizer, limits, clock=clock))
        return transports[-1]

    try:
        yield SwarmHarness(join=join, run_id=RUN_ID, now=clock, advance=clock.advance, max_age_s=LIMITS.max_age_s,
                           poll_interval_s=0.0, timeout_s=1.0, quiet_s=0.0)
    finally:
        for t in transports:
            t.close()


@contextmanager
def lockstep_swarm(request: pytest.FixtureRequest) -> Iterator[SwarmHarness]:
    with memory_swarm(request, lockstep=True) as harness:
        yield harness


HIVEMIND_MAX_AGE_S = 60.0  # time is shifted on, not waited for: long, so no slow start ages a batch


def hivemind_settings(run_id: str) -> dict:
    return dict(run_id=run_id, host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2, announce_interval_s=1.0,
                announcement_ttl_s=30.0, max_age_s=HIVEMIND_MAX_AGE_S, fetch_timeout_s=5.0,
                per_peer_quota=LIMITS.per_peer_quota, max_buffered_batches=LIMITS.max_batches,
                max_buffered_bytes=LIMITS.max_bytes)


@pytest.fixture(scope="module")
def hivemind_bootstrap() -> Iterator[list[str]]:
    """One bootstrap DHT peer for every hivemind contract test (each test has a run of its own, so
    announcements of an earlier test's closed peers are not in its keys); yields its multiaddrs."""
    from ftis.node.config import SwarmConfig  # imports torch (~3 s): only when this implementation runs
    from ftis.node.swarm.dht.transport import start_dht

    scratch = Path(tempfile.mkdtemp(prefix="ftis-contract-"))
    try:
        bootstrap, _ = start_dht(SwarmConfig(**hivemind_settings(RUN_ID)), scratch / "bootstrap.key", announce=False)
        try:
            yield [str(m) for m in bootstrap.get_visible_maddrs()]
        finally:
            bootstrap.shutdown()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# A large swarm's reads on a small one: 2 of 16 shards a poll, never more, what the last 8 polls read remembered
# (all 16 shards), a beam of 2; every contract holds as with full reads.
SAMPLED = dict(shards=16, shards_per_poll=2, want_peers=0, remember_polls=8, read_beam_size=2)


@contextmanager
def hivemind_swarm(request: pytest.FixtureRequest, **sampling: int) -> Iterator[SwarmHarness]:
    """``HivemindTransport`` peers on 127.0.0.1 in a fresh run, joined through the module's bootstrap;
    ``advance`` shifts the clock the transports age batches by (the DHT's own clock is untouched)."""
    from hivemind.utils import get_dht_time

    from ftis.node.config import SwarmConfig
    from ftis.node.swarm.dht.transport import HivemindTransport

    run_id = f"contract-{uuid.uuid4().hex[:12]}"
    config = SwarmConfig(**hivemind_settings(run_id), initial_peers=request.getfixturevalue("hivemind_bootstrap"),
                         **sampling)
    clock = ShiftedClock(get_dht_time)
    transports: list[HivemindTransport] = []

    def join(name: str, tokenizer: str = TOKENIZER, other_tokenizers: bool = True,
             max_bytes: int = LIMITS.max_bytes) -> Transport:
        settings = config.model_copy(update={"other_tokenizers": "sequence" if other_tokenizers else "skip",
                                             "max_buffered_bytes": max_bytes})
        transports.append(HivemindTransport(settings, tokenizer, clock=clock))  # the peer id is its own, not name
        return transports[-1]

    try:
        yield SwarmHarness(join=join, run_id=run_id, now=clock, advance=clock.advance, max_age_s=HIVEMIND_MAX_AGE_S,
                           poll_interval_s=0.05, timeout_s=60.0, quiet_s=0.6)
    finally:
        with ThreadPoolExecutor(max(1, len(transports))) as pool:
            list(pool.map(lambda t: t.close(), transports))


@contextmanager
def sampled_hivemind_swarm(request: pytest.FixtureRequest) -> Iterator[SwarmHarness]:
    with hivemind_swarm(request, **SAMPLED) as harness:
        yield harness


IMPLEMENTATIONS = {"memory": memory_swarm, "lockstep": lockstep_swarm, "hivemind": hivemind_swarm,
                   "hivemind-sampled": sampled_hivemind_swarm}
# these start real peers: marked ``hivemind`` (conftest reaps what they leave)
REAL_NETWORK = {"hivemind", "hivemind-sampled"}


@pytest.fixture(params=[pytest.param(name, marks=[pytest.mark.hivemind] if name in REAL_NETWORK else [])
                        for name in IMPLEMENTATIONS])
def swarm(request) -> Iterator[SwarmHarness]:
    with IMPLEMENTATIONS[request.param](request) as harness:
        yield harness


# --- helpers ----------------------------------------------------------------------------------------


def ids(received: list[ReceivedBatch]) -> list[tuple[str, int]]:
    return [(r.peer_id, r.batch.round) for r in received]


def has(expected: dict[str, set[tuple[str, int]]]) -> Callable[[Received], bool]:
    """A settle predicate: each receiver got at least the (peer id, round) pairs expected of it."""
    return lambda got: all(expected[peer] <= set(ids(got[peer])) for peer in expected)


def publish(t: Transport, round_: int, swarm: SwarmHarness, **batch) -> RolloutBatch:
    created = make_batch(t.peer_id, round_, batch.pop("created_at", swarm.now()), run_id=swarm.run_id, **batch)
    t.publish(created)
    return created


# --- contracts --------------------------------------------------------------------------------------


def test_every_peer_gets_the_others_batches_exactly_once(swarm):
    peers = swarm.peers(3)
    published = {(t.peer_id, round_): publish(t, round_, swarm) for t in peers for round_ in (0, 1)}
    expected = {t.peer_id: {key for key in published if key[0] != t.peer_id} for t in peers}
    got = swarm.settle(peers, has(expected))
    for _ in range(3):  # more rounds bring nothing new
        for peer, more in swarm.settle(peers, lambda _: False, timeout=swarm.quiet_s).items():
            got[peer] += more
    for t in peers:
        assert sorted(ids(got[t.peer_id])) == sorted(expected[t.peer_id])  # once each, never its own
        for r in got[t.peer_id]:
            sent = published[(r.peer_id, r.batch.round)]
            assert r.batch.peer_id == r.peer_id != t.peer_id
            assert r.batch == sent
            assert encode(r.batch) == encode(sent)  # byte-identical on the wire
            assert r.payload_bytes == len(encode(sent))


def test_members_lists_every_peer_as_it_announced_itself(swarm):
    peers = swarm.peers(3)
    published: dict[str, list[RolloutBatch]] = {}
    for i, t in enumerate(peers):
        adapter = "lora" if i % 2 else "full"
        published[t.peer_id] = [publish(t, round_, swarm, model=f"model-{i}", adapter=adapter,
                                        policy_version=10 * i + round_) for round_ in range(i + 1)]
    expected = {t.peer_id: {(p, b.round) for p, bs in published.items() if p != t.peer_id for b in bs} for t in peers}
    swarm.settle(peers, has(expected))
    for t in peers:
        members = {m.peer_id: m for m in t.members()}
        assert set(members) == set(published)  # this node included
        for peer, batches in published.items():
            m, last = members[peer], batches[-1]
            assert (m.model, m.adapter, m.tokenizer) == (last.policy.model, last.policy.adapter, TOKENIZER)
            assert m.policy_version == last.policy.policy_version
            assert m.published_batches == len(batches)
            assert m.published_tokens == sum(b.num_completion_tokens for b in batches)


def test_a_batch_older_than_max_age_is_not_delivered(swarm):
    alice, bob = swarm.peers(2)
    publish(alice, 0, swarm, created_at=swarm.now() - swarm.max_age_s - 5)
    publish(alice, 1, swarm)  # the marker
    got = swarm.settle([bob], has({bob.peer_id: {(alice.peer_id, 1)}}))
    assert ids(got[bob.peer_id]) == [(alice.peer_id, 1)]
    assert bob.stats().rejections == {(alice.peer_id, "stale"): 1}


def test_another_tokenizer_is_delivered_or_skipped_and_counted_as_each_peer_chooses(swarm):
    alice, bob = swarm.peers(2)  # they take other tokenizers' batches (the default)
    picky = swarm.join("picky", other_tokenizers=False)
    odd = swarm.join("odd", tokenizer="tok-other")
    publish(odd, 0, swarm, tokenizer="tok-other")
    publish(alice, 0, swarm)  # the marker
    got = swarm.settle([bob], has({bob.peer_id: {(alice.peer_id, 0), (odd.peer_id, 0)}}))
    assert sorted(ids(got[bob.peer_id])) == sorted([(alice.peer_id, 0), (odd.peer_id, 0)])
    assert bob.stats().rejections == {}
    # Two publishers: on a network picky may read alice's announcement before odd's, so the marker alone does
    # not say odd's batch was considered; its count does (each batch gets one final answer).
    marker = has({picky.peer_id: {(alice.peer_id, 0)}})
    got = swarm.settle([picky], lambda got: marker(got) and (odd.peer_id, "tokenizer") in picky.stats().rejections)
    assert ids(got[picky.peer_id]) == [(alice.peer_id, 0)]
    assert picky.stats().rejections == {(odd.peer_id, "tokenizer"): 1}
    got = swarm.settle([odd], has({odd.peer_id: {(alice.peer_id, 0)}}))  # and the odd one takes theirs
    assert ids(got[odd.peer_id]) == [(alice.peer_id, 0)] and odd.stats().rejections == {}


def test_a_late_joiner_gets_only_batches_within_max_age(swarm):
    alice, bob = swarm.peers(2)
    publish(alice, 0, swarm)
    swarm.settle([bob], has({bob.peer_id: {(alice.peer_id, 0)}}))
    swarm.advance(0.6 * swarm.max_age_s)
    publish(alice, 1, swarm)
    swarm.advance(0.6 * swarm.max_age_s)  # alice 0 is now too old, alice 1 is not
    publish(alice, 2, swarm)  # the marker
    carol = swarm.join("carol")
    want = {alice.peer_id: set(), bob.peer_id: {(alice.peer_id, 1), (alice.peer_id, 2)},
            carol.peer_id: {(alice.peer_id, 1), (alice.peer_id, 2)}}
    got = swarm.settle([alice, bob, carol], has(want))
    assert sorted(ids(got[carol.peer_id])) == sorted(want[carol.peer_id])
    assert carol.stats().rejections == {(alice.peer_id, "stale"): 1}
    assert sorted(ids(got[bob.peer_id])) == sorted(want[bob.peer_id])
    assert bob.stats().rejections == {}  # bob got alice 0 in time: its ageing is no rejection


def test_the_others_keep_exchanging_after_one_closes(swarm):
    alice, bob, carol = swarm.peers(3)
    publish(carol, 0, swarm)
    carol.close()
    carol.close()  # idempotent
    with pytest.raises(RuntimeError):
        carol.receive()
    with pytest.raises(RuntimeError):
        publish(carol, 1, swarm)
    publish(alice, 0, swarm)
    publish(bob, 0, swarm)
    want = {alice.peer_id: {(bob.peer_id, 0)}, bob.peer_id: {(alice.peer_id, 0)}}
    got = swarm.settle([alice, bob], has(want))
    for t in (alice, bob):  # carol's batch may or may not have made it out: either is fine
        assert want[t.peer_id] <= set(ids(got[t.peer_id])) <= want[t.peer_id] | {(carol.peer_id, 0)}


def test_stats_count_published_and_delivered_batches_and_bytes(swarm):
    alice, bob = swarm.peers(2)
    sent = [publish(alice, 0, swarm), publish(alice, 1, swarm), publish(bob, 0, swarm)]
    size = {(b.peer_id, b.round): len(encode(b)) for b in sent}
    got = swarm.settle([alice, bob], has({alice.peer_id: {(bob.peer_id, 0)},
                                          bob.peer_id: {(alice.peer_id, 0), (alice.peer_id, 1)}}))
    for t in (alice, bob):
        stats = t.stats()
        mine = [key for key in size if key[0] == t.peer_id]
        theirs = ids(got[t.peer_id])
        assert (stats.published_batches, stats.published_bytes) == (len(mine), sum(size[k] for k in mine))
        assert (stats.delivered_batches, stats.delivered_bytes) == (len(theirs), sum(size[k] for k in theirs))
        assert stats.rejections == {}


def test_a_payload_that_decodes_past_the_receivers_room_is_refused_charged_to_its_peer_and_the_next_arrives(swarm):
    """Every transport opens a fetched payload the same way: charged what decoding takes before a byte is inflated,
    refused (``too_large``) when that is more than the receiver holds, counted once, and held against the peer's
    score; the peer's next batch, which fits, is delivered, counted and scored as any other."""
    alice = swarm.join("alice")
    big = make_batch(alice.peer_id, 0, swarm.now(), run_id=swarm.run_id, groups=32, group_size=8)
    data = encode(big)
    charge = len(data) + read(data).cost(texts=False)  # the receiver's own tokenizer: it reads the ids alone
    bob = swarm.join("bob", max_bytes=charge - 1)  # room for its announced size, not for what decoding it takes
    alice.publish(big)
    marker = publish(alice, 1, swarm)
    refused = (alice.peer_id, "too_large")
    got = swarm.settle([bob], lambda got: has({bob.peer_id: {(alice.peer_id, 1)}})(got)
                       and refused in bob.stats().rejections)
    assert ids(got[bob.peer_id]) == [(alice.peer_id, 1)]
    stats = bob.stats()
    assert stats.rejections == {refused: 1}
    assert (stats.delivered_batches, stats.delivered_bytes) == (1, len(encode(marker)))
    score = bob.scores()[alice.peer_id]
    assert score.good > 0 and score.bad > 0 and score.muted_until is None
