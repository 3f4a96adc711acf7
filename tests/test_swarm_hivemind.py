"""A real swarm on 127.0.0.1: hivemind DHT peers, signed announcements, payloads over libp2p streams.

Run: python -m pytest tests/test_swarm_hivemind.py -q      (marker ``hivemind``; about 30 s)

One swarm serves the module, all of it started at once: a bootstrap DHT peer; alice, bob and carol;
``patient``, whose fetch deadline is long, which publishes for the late-joiner test and whose clock
jumps in the retry test; a node in its own OS process (``tests/helpers/swarm_peer.py``) that one test kills
with SIGKILL; a rogue peer (``tests/helpers/hostile_peer.py``) that announces real batches but serves each one
the way a test scripts it; and two bare DHT peers, a forger and an impostor. The plumbing (peers,
swarm, waits, killing) is ``tests/helpers/hivemind_swarm.py``, shared with ``test_hostile_peers.py``. Tests
use fresh rounds and look only at the batches and rejections of the peers they involve, so
they do not depend on each other's order, except that the last test kills the bootstrap.

Every node ages batches by a clock of its own (``ShiftedClock``) that a test can move on instead of
sleeping. Every wait polls until its condition holds, under a deadline that only a broken (or badly
overloaded) swarm reaches.
"""

import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hivemind
import pytest
from helpers.child_lines import read_lines, wait_for_line
from helpers.hivemind_swarm import DEADLINE_S, JOIN_DEADLINE_S, Peer, Swarm, delta, kill_tree, start_bootstrap
from helpers.hostile_peer import HostilePeer, claims_a_terabyte, hangs_up, serves, stalls_mid_payload, tampered
from helpers.swarm import TOKENIZER
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils import get_dht_time
from hivemind.utils.crypto import RSAPrivateKey

from ftis.node.swarm.dht.directory import read_members
from ftis.node.swarm.dht.fetch import retry_delay
from ftis.node.swarm.dht.records import run_prefix, shard_key, shard_of
from ftis.node.swarm.dht.transport import start_dht
from ftis.node.swarm.exchange.reasons import BAD_ANNOUNCEMENT, FETCH_FAILED, HASH_MISMATCH, STALE, TOO_LARGE
from ftis.protocol import encode
from ftis.protocol.announcement import decode_announcement, encode_announcement
from ftis.protocol.limits import MAX_ANNOUNCEMENT_BYTES

pytestmark = pytest.mark.hivemind

RUN = "hivemind-test"
FETCH_TIMEOUT_S = 3.0  # a loopback fetch takes milliseconds; a slow one under load is retried
RETRY_BACKOFF_S = 0.5
MAX_AGE_S = 30.0  # tests back-date batches or move clocks on instead of waiting
# A long TTL: on a loaded machine hivemind's 3 s RPC timeout fails some renewals, and a short TTL lets
# announcements lapse in between. Renewals come every second; a publish announces at once.
SETTINGS = dict(run_id=RUN, host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2, announce_interval_s=1.0,
                announcement_ttl_s=30.0, max_age_s=MAX_AGE_S, fetch_timeout_s=FETCH_TIMEOUT_S, fetch_retries=1,
                fetch_retry_backoff_s=RETRY_BACKOFF_S, per_peer_quota=64, max_buffered_batches=256)
TESTS = Path(__file__).parent  # the node runs as ``python -m helpers.swarm_peer`` from here


class FarNode:
    """``tests/helpers/swarm_peer.py`` in its own process; its stderr (hivemind's log) goes to a file."""

    def __init__(self, maddr: str, log: Path):
        self.log = log
        with log.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "helpers.swarm_peer", "--peer", maddr, "--run-id", RUN, "--interval", "0.5"],
                cwd=TESTS, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self._lines = read_lines(self.process)
        self._peer_id: str | None = None

    def peer_id(self, timeout: float = JOIN_DEADLINE_S) -> str:
        """Its peer id, once it has joined (it imports torch first: seconds)."""
        if self._peer_id is None:
            self._peer_id = wait_for_line(self.process, self._lines, "peer ", timeout, self.log).split()[1]
        return self._peer_id

    def stop(self) -> None:
        """SIGTERM (a clean shutdown: its handler closes the transport) and wait; SIGKILL if it hangs."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                kill_tree(self.process.pid)
                self.process.wait()


# --- the module's swarm -------------------------------------------------------------------------------


@dataclasses.dataclass
class World:
    swarm: Swarm
    alice: Peer
    bob: Peer
    carol: Peer
    patient: Peer  # gives a fetch a deadline of DEADLINE_S
    rogue: HostilePeer
    far: FarNode
    forger: hivemind.DHT  # runs no validators at all
    impostor: tuple[hivemind.DHT, bytes]  # this run's validators, a key of its own, and its signed subkey

    @property
    def trio(self) -> list[Peer]:
        return [self.alice, self.bob, self.carol]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("swarm")
    swarm = Swarm(start_bootstrap(folder, SETTINGS), SETTINGS)
    far, extras = None, []
    try:
        far = FarNode(swarm.maddrs[0], folder / "far-node.log")  # imports torch while the others join
        with ThreadPoolExecutor(4) as pool:
            regular = pool.submit(swarm.join, 4)
            patient = pool.submit(swarm.join, 1, fetch_timeout_s=DEADLINE_S)
            forger = pool.submit(hivemind.DHT, initial_peers=swarm.maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                                 client_mode=True, startup_timeout=JOIN_DEADLINE_S, start=True)
            impostor = pool.submit(start_dht, swarm.config, folder / "impostor.key", announce=True)
            extras = [forger, impostor]
            alice, bob, carol, rogue = regular.result()
            (patient,) = patient.result()
            yield World(swarm, alice, bob, carol, patient, HostilePeer(rogue, TOKENIZER), far, forger.result(),
                        impostor.result())
    finally:
        if far is not None and far.process.poll() is None:
            far.process.terminate()  # it shuts down while the others close
        bare = [extra.result() for extra in extras if extra.exception() is None]
        bare = [dht if isinstance(dht, hivemind.DHT) else dht[0] for dht in bare]
        with ThreadPoolExecutor(max(1, len(bare))) as pool:  # while the swarm closes
            for dht in bare:
                pool.submit(dht.shutdown)
            swarm.close()
        if far is not None:
            far.stop()


# --- exchange -----------------------------------------------------------------------------------------


def test_three_nodes_receive_each_others_batches_byte_identical_exactly_once(world):
    sent = {(node.peer_id, b.round): b for node in world.trio for b in (node.publish(), node.publish())}

    def everyone_has_the_others() -> bool:
        return all({k for k in sent if k[0] != n.peer_id} <= {(r.peer_id, r.batch.round) for r in n.log}
                   for n in world.trio)

    world.swarm.wait_until(everyone_has_the_others, "each node has the other two's batches")
    quiet_until = time.monotonic() + 1.2  # more polls and a re-announcement: nothing may come twice
    world.swarm.wait_until(lambda: time.monotonic() > quiet_until, "a quiet period")
    for node in world.trio:
        delivered = [(r.peer_id, r.batch.round) for r in node.log]
        assert len(delivered) == len(set(delivered)), f"a batch was delivered twice to {node.peer_id}"
        mine = [r for r in node.log if (r.peer_id, r.batch.round) in sent]
        assert sorted((r.peer_id, r.batch.round) for r in mine) == sorted(k for k in sent if k[0] != node.peer_id)
        for r in mine:
            original = sent[(r.peer_id, r.batch.round)]
            assert r.batch == original
            assert encode(r.batch) == encode(original)  # byte-identical
            assert r.payload_bytes == len(encode(original))


def test_a_late_joiner_receives_only_batches_within_the_max_age(world):
    elder, bob = world.patient, world.bob
    now = get_dht_time()
    old = elder.publish(created_at=now - MAX_AGE_S - 5).round
    recent = [elder.publish(created_at=now - MAX_AGE_S / 2).round, elder.publish().round]
    with ThreadPoolExecutor(1) as pool:
        joining = pool.submit(world.swarm.join, 1)  # after the batches were published
        world.swarm.wait_until(lambda: set(recent) <= set(bob.got(elder.peer_id)), "bob has elder's recent batches")
        (late,) = joining.result()
    try:
        world.swarm.wait_until(lambda: set(recent) <= set(late.got(elder.peer_id)), "the late joiner has them too")
        assert sorted(late.got(elder.peer_id)) == recent  # fetched concurrently: any order
        assert old not in bob.got(elder.peer_id)
        assert late.rejections(elder.peer_id) == {STALE: 1}
    finally:
        world.swarm.leave(late)


def test_poll_now_reads_the_announcements_without_waiting_out_the_period(world):
    """Rounds mode asks for it while it waits for a round's batches: a peer that reads announcements once a
    minute gets a batch published after its last read only when asked, and then at once."""
    (slow,) = world.swarm.join(1, poll_interval_s=60.0)
    try:
        alice = world.alice
        quiet_until = time.monotonic() + 1.0  # its first read, at start, is over
        world.swarm.wait_until(lambda: time.monotonic() > quiet_until, "the slow peer's first read")
        round_ = alice.publish().round
        quiet_until = time.monotonic() + 2.0  # announced (alice announces at once) but not read
        world.swarm.wait_until(lambda: time.monotonic() > quiet_until, "a period the slow peer does not read in")
        assert round_ not in slow.got(alice.peer_id)
        slow.transport.poll_now()
        took = world.swarm.wait_until(lambda: round_ in slow.got(alice.peer_id), "the slow peer has alice's batch")
        assert took < 10.0
    finally:
        world.swarm.leave(slow)


# --- fetches that fail --------------------------------------------------------------------------------


def test_a_fetch_failed_in_transit_is_retried_after_a_backoff_while_the_batch_is_fresh(world):
    rogue, elder = world.rogue, world.patient  # an elder whose clock jumps on
    fetchers = world.trio
    before = {node.peer_id: node.rejections(rogue.peer_id) for node in [*fetchers, elder]}
    round_ = rogue.next_round  # the batch offered below

    async def drops_the_first_request(fetcher: str, reader, writer, payload: bytes) -> None:
        if fetcher == elder.peer_id:  # elder's clock jumps past the max age: a retry would fetch a stale batch
            elder.clock.advance(MAX_AGE_S + 10)
            await hangs_up(fetcher, reader, writer, payload)
        elif len(rogue.requests[(fetcher, round_)]) == 1:
            await hangs_up(fetcher, reader, writer, payload)
        else:
            await serves(fetcher, reader, writer, payload)

    try:
        assert rogue.offer(drops_the_first_request) == round_
        world.swarm.wait_until(lambda: all(round_ in node.got(rogue.peer_id) for node in fetchers),
                               "every fetcher has the batch on its second attempt")
        world.swarm.wait_until(lambda: delta(elder.rejections(rogue.peer_id), before[elder.peer_id]),
                               "elder gives up")
    finally:
        elder.clock.shift = 0.0
    for node in fetchers:
        first, second = rogue.asked(node.peer_id, round_)  # exactly two attempts
        assert second - first >= RETRY_BACKOFF_S
        assert delta(node.rejections(rogue.peer_id), before[node.peer_id]) == {}
    assert len(rogue.asked(elder.peer_id, round_)) == 1  # the batch turned stale: no retry
    assert delta(elder.rejections(rogue.peer_id), before[elder.peer_id]) == {FETCH_FAILED: 1}
    assert round_ not in elder.got(rogue.peer_id)


def test_retries_wait_longer_each_time():
    assert [retry_delay(0.5, attempt) for attempt in range(4)] == [0.5, 1.0, 2.0, 4.0]


def test_a_peer_stalling_mid_payload_costs_the_fetcher_one_deadline_per_attempt(world):
    rogue, alice, patient = world.rogue, world.alice, world.patient
    fetchers = world.trio
    before = {node.peer_id: node.rejections(rogue.peer_id) for node in [*fetchers, patient]}
    round_ = rogue.offer(stalls_mid_payload)
    world.swarm.wait_until(lambda: all(rogue.asked(node.peer_id, round_) for node in [*fetchers, patient]),
                           "every node is fetching the stalling batch")
    marker = alice.publish().round
    # A stalled fetch holds up no other: the patient node, whose fetch of the stalled batch is pending
    # for DEADLINE_S (no race with a short deadline on a loaded machine), gets alice's batch meanwhile.
    world.swarm.wait_until(lambda: marker in patient.got(alice.peer_id), "the patient node gets alice's batch")
    assert delta(patient.rejections(rogue.peer_id), before[patient.peer_id]) == {}

    failed_at: dict[str, float] = {}

    def all_failed() -> bool:
        for node in fetchers:
            if node.peer_id not in failed_at and delta(node.rejections(rogue.peer_id), before[node.peer_id]):
                failed_at[node.peer_id] = time.monotonic()
        return len(failed_at) == len(fetchers)

    world.swarm.wait_until(all_failed, "every node gives up on the stalled fetch", timeout=6 * FETCH_TIMEOUT_S)
    for node in fetchers:
        assert delta(node.rejections(rogue.peer_id), before[node.peer_id]) == {FETCH_FAILED: 1}
        first, second = rogue.asked(node.peer_id, round_)  # one retry (fetch_retries = 1), then it gives up
        # One deadline per attempt, a backoff between them, and no hang. A deadline runs from before the
        # connection, so the first request came at most one deadline into the first attempt: from it,
        # the retry's request is at least a backoff away and the end at least a deadline and a backoff.
        # The slack above is for a loaded machine.
        assert RETRY_BACKOFF_S <= second - first < FETCH_TIMEOUT_S + RETRY_BACKOFF_S + 2.0
        assert failed_at[node.peer_id] - first >= FETCH_TIMEOUT_S + RETRY_BACKOFF_S
        assert failed_at[node.peer_id] - second < FETCH_TIMEOUT_S + 2.0
        assert round_ not in node.got(rogue.peer_id)
    world.swarm.wait_until(lambda: all(marker in n.got(alice.peer_id) for n in [world.bob, world.carol]),
                           "the others get alice's batch too")


# --- hostile peers ------------------------------------------------------------------------------------


def test_a_forged_announcement_under_another_peers_subkey_is_rejected(world):
    alice, bob = world.alice, world.bob
    marker = alice.publish().round
    world.swarm.wait_until(lambda: marker in bob.got(alice.peer_id), "alice has announced")
    key, subkey = shard_key(RUN, shard_of(alice.peer_id, world.swarm.config.shards)), alice.transport._owner
    genuine = alice.transport._outbox.announcement()
    forged = encode_announcement(dataclasses.replace(genuine, model="forged-model", updated_at=get_dht_time()))
    # The forger runs no validators at all: nothing it stores is signed, every DHT peer must refuse it. (Its own
    # storage, without validators, would take it whenever its random id is among the key's nearest: left out.)
    later = get_dht_time() + 60  # would outlive alice's renewals if it were accepted
    assert world.forger.store(key, forged, expiration_time=later, subkey=subkey, exclude_self=True) is False
    assert world.forger.store(key, b"wiped", expiration_time=later, exclude_self=True) is False  # over the shard
    reading = read_members(world.swarm.bootstrap, RUN, world.swarm.config.shards)
    members = {m.peer_id: m for m in reading.members}
    assert members[alice.peer_id].model == genuine.model
    assert {m.peer_id: m for m in bob.transport.members()}[alice.peer_id].model == genuine.model
    assert BAD_ANNOUNCEMENT not in bob.rejections(alice.peer_id)


def test_an_announcement_signed_by_another_key_than_its_peer_ids_is_a_bad_announcement(world):
    alice, bob, carol = world.alice, world.bob, world.carol
    alice.publish()
    claim = alice.transport._outbox.announcement()  # alice's own words, with a batch she never published
    claim = dataclasses.replace(claim, batches=(dataclasses.replace(claim.batches[-1], round=10_000),),
                                updated_at=get_dht_time())
    assert decode_announcement(encode_announcement(claim)).peer_id == alice.peer_id
    dht, owner = world.impostor
    impostor = dht.peer_id.to_base58()
    # signed with the impostor's own key, under its own subkey: the DHT accepts it (a store can time out
    # on a loaded machine: the impostor tries again, each time with a later expiration, as it must)...
    deadline = time.monotonic() + DEADLINE_S
    while not dht.store(shard_key(RUN, 0), encode_announcement(claim), expiration_time=get_dht_time() + 30,
                        subkey=owner):
        assert time.monotonic() < deadline, "no DHT peer accepted the impostor's validly signed record"
    # ... and every reader refuses it, counted against the key that signed it
    world.swarm.wait_until(lambda: all(n.rejections(impostor) == {BAD_ANNOUNCEMENT: 1} for n in (bob, carol)),
                           "bob and carol count the impostor's announcement")
    for node in (bob, carol):
        assert 10_000 not in node.got(alice.peer_id)
        assert impostor not in {m.peer_id for m in node.transport.members()}
        assert BAD_ANNOUNCEMENT not in node.rejections(alice.peer_id)


def test_records_that_would_hide_other_peers_or_outlive_their_owner_are_stored_nowhere(world):
    # An attacker whose DHT peer checks signatures only (no schema, no lifetime): it signs whatever it stores,
    # so only the honest peers' validators stand between it and the run's shards. One key may write one
    # subkey, an announcement's size, for at most the TTL; the run's namespace holds its shard keys only.
    alice, bob = world.alice, world.bob
    signer = RSASignatureValidator(RSAPrivateKey())  # a key of its own (not the process-wide one)
    attacker = hivemind.DHT(initial_peers=world.swarm.maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                            client_mode=True, record_validators=[signer], startup_timeout=JOIN_DEADLINE_S,
                            start=True)
    try:
        owner, key = signer.local_public_key, shard_key(RUN, 0)
        record = encode_announcement(alice.transport._outbox.announcement())
        soon = get_dht_time() + 30
        refused = {
            "a padded subkey": dict(key=key, value=record, subkey=owner + b"pad1", expiration_time=soon),
            "two markers": dict(key=key, value=record, subkey=owner + owner, expiration_time=soon),
            "an over-size value": dict(key=key, value=b"x" * (MAX_ANNOUNCEMENT_BYTES + 1), subkey=owner,
                                       expiration_time=soon),
            "a year's expiry": dict(key=key, value=record, subkey=owner, expiration_time=get_dht_time() + 3.2e7),
            "another key of the run": dict(key=f"{run_prefix(RUN)}_extra", value=b"x" * 4096, expiration_time=soon),
            "a key of no run": dict(key="elsewhere", value=b"x" * 4096, expiration_time=soon),
        }
        for what, store in refused.items():
            assert attacker.store(**store) is False, what
        # the same signer, the same record, within the rules: stored (so the refusals above are the rules')
        deadline = time.monotonic() + DEADLINE_S
        while not attacker.store(key, record, subkey=owner, expiration_time=get_dht_time() + 30):
            assert time.monotonic() < deadline, "no DHT peer accepted a record within the rules"
    finally:
        attacker.shutdown()
    members = {m.peer_id for m in read_members(world.swarm.bootstrap, RUN, world.swarm.config.shards).members}
    assert alice.peer_id in members and bob.peer_id in members


def test_a_payload_that_does_not_match_its_announcement_is_rejected(world):
    rogue = world.rogue
    before = {node.peer_id: node.rejections(rogue.peer_id) for node in world.trio}
    round_ = rogue.offer(tampered)
    world.swarm.wait_until(
        lambda: all(delta(n.rejections(rogue.peer_id), before[n.peer_id]) for n in world.trio),
        "every node refuses the tampered payload")
    for node in world.trio:
        assert delta(node.rejections(rogue.peer_id), before[node.peer_id]) == {HASH_MISMATCH: 1}
        assert len(rogue.asked(node.peer_id, round_)) == 1  # a refused payload is never asked for again
        assert round_ not in node.got(rogue.peer_id)


def test_an_over_limit_payload_is_rejected_without_reading_it(world):
    rogue = world.rogue
    before = {node.peer_id: node.rejections(rogue.peer_id) for node in world.trio}
    round_ = rogue.offer(claims_a_terabyte)
    refused_at: dict[str, float] = {}

    def all_refused() -> bool:
        for node in world.trio:
            if node.peer_id not in refused_at and delta(node.rejections(rogue.peer_id), before[node.peer_id]):
                refused_at[node.peer_id] = time.monotonic()
        return len(refused_at) == len(world.trio)

    world.swarm.wait_until(all_refused, "every node refuses the over-limit payload")
    for node in world.trio:
        # too_large, not fetch_failed: refused on the length alone, not after waiting for the body
        assert delta(node.rejections(rogue.peer_id), before[node.peer_id]) == {TOO_LARGE: 1}
        (asked,) = rogue.asked(node.peer_id, round_)  # and never asked for again
        assert refused_at[node.peer_id] - asked < FETCH_TIMEOUT_S
        assert round_ not in node.got(rogue.peer_id)


# --- nodes dying (last in the file: the node in its own process has had time to start, and the
# --- bootstrap, killed last of all, is needed by nothing after it)


def test_the_others_keep_exchanging_after_a_node_is_killed(world):
    far_id = world.far.peer_id()
    world.swarm.wait_until(lambda: all(node.got(far_id) for node in world.trio),
                           "every node has a batch of the node in its own process")
    kill_tree(world.far.process.pid)
    assert world.far.process.wait(10) == -9
    sent = {node.peer_id: node.publish().round for node in world.trio}
    world.swarm.wait_until(
        lambda: all(sent[other.peer_id] in node.got(other.peer_id)
                    for node in world.trio for other in world.trio if other is not node),
        "each node has the other two's batches published after the kill")


def test_the_others_keep_exchanging_after_the_bootstrap_is_killed(world):
    bootstrap = world.swarm.bootstrap
    kill_tree(bootstrap.pid)
    bootstrap.join(10)  # reaps it; shutdown() is then a no-op
    assert not bootstrap.is_alive()
    sent = {node.peer_id: node.publish().round for node in world.trio}
    world.swarm.wait_until(
        lambda: all(sent[other.peer_id] in node.got(other.peer_id)
                    for node in world.trio for other in world.trio if other is not node),
        "each node has the other two's batches published after the bootstrap died")
