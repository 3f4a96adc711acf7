"""What only the memory transport lets a test do: play a hostile peer. A forged announcement and a
payload altered in transit must be refused and counted, and nothing of them delivered.

Run: python -m pytest tests/test_memory_transport.py -q

The contracts every transport shares are in ``test_transport_contract.py``; the real network's
versions of these attacks (a record under another peer's subkey, a payload that does not match its
signed announcement) belong with the hivemind tests.
"""

import pytest
from helpers.swarm import RUN_ID, TOKENIZER, FakeClock, make_batch, publish

from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.protocol.announcement import encode_announcement

LIMITS = InboxLimits(max_age_s=60.0, per_peer_quota=8, max_batches=32, max_bytes=1 << 20)


@pytest.fixture
def hub():
    return MemoryHub()


@pytest.fixture
def peers(hub):
    """alice publishes, bob receives."""
    clock = FakeClock()
    alice, bob = (MemoryTransport(hub, RUN_ID, name, TOKENIZER, LIMITS, clock=clock) for name in ("alice", "bob"))
    yield alice, bob
    alice.close()
    bob.close()


def poll(transport: MemoryTransport, rounds: int = 3) -> list[tuple[str, int]]:
    return [(r.peer_id, r.batch.round) for _ in range(rounds) for r in transport.receive()]


def test_garbage_announced_as_a_peer_is_a_bad_announcement(hub, peers):
    alice, bob = peers
    alice.publish(make_batch("alice", 0))
    hub.put_raw_announcement("mallory", b"\x81\xa1v\x01 not an announcement")
    assert poll(bob) == [("alice", 0)]
    rejections = bob.stats().rejections
    assert set(rejections) == {("mallory", "bad_announcement")} and rejections[("mallory", "bad_announcement")] >= 1
    assert "mallory" not in {m.peer_id for m in bob.members()}


def test_an_announcement_claiming_another_peer_id_is_refused(hub, peers):
    """mallory stores an announcement that claims to be alice's and lists a batch of hers: on the DHT,
    signed by mallory's key. Nothing of it is fetched; alice's own batch still arrives, once."""
    alice, bob = peers
    alice.publish(make_batch("alice", 0))
    forged = publish(make_batch("alice", 7))  # names alice, lists a batch alice never published
    hub.put_raw_announcement("mallory", encode_announcement(forged.announcement))
    assert poll(bob) == [("alice", 0)]
    assert set(bob.stats().rejections) == {("mallory", "bad_announcement")}
    assert bob.stats().delivered_batches == 1


def test_a_payload_that_does_not_match_its_hash_is_refused(hub, peers, monkeypatch):
    alice, bob = peers
    alice.publish(make_batch("alice", 0))
    genuine = hub.fetch

    def altered(peer_id: str, round_: int) -> bytes | None:
        data = bytearray(genuine(peer_id, round_))
        data[-1] ^= 0x01  # same size, one bit changed
        return bytes(data)

    monkeypatch.setattr(hub, "fetch", altered)
    assert poll(bob) == []
    assert bob.stats().rejections == {("alice", "hash_mismatch"): 1}  # refused once, never refetched


@pytest.mark.parametrize(("payload", "reason"), [
    (lambda data: None, "fetch_failed"),  # the peer no longer holds it
    (lambda data: data[:-10], "fetch_failed"),  # the stream ended early
    (lambda data: data + b"\x00", "too_large"),
])
def test_a_payload_of_the_wrong_size_is_refused(hub, peers, monkeypatch, payload, reason):
    alice, bob = peers
    alice.publish(make_batch("alice", 0))
    genuine = hub.fetch
    monkeypatch.setattr(hub, "fetch", lambda peer_id, round_: payload(genuine(peer_id, round_)))
    assert poll(bob) == []
    assert bob.stats().rejections == {("alice", reason): 1}


def test_a_replayed_batch_of_another_peer_is_not_as_announced(hub, peers, monkeypatch):
    """mallory serves alice's batch, honestly hashed, under her own signed announcement: the bytes
    match, but the batch inside names alice, so bob refuses it."""
    _, bob = peers
    replay = publish(make_batch("alice", 0), announced_by="mallory")
    hub.put_raw_announcement("mallory", encode_announcement(replay.announcement))
    genuine = hub.fetch
    monkeypatch.setattr(hub, "fetch", lambda peer, round_: replay.data if peer == "mallory" else genuine(peer, round_))
    assert poll(bob) == []
    assert bob.stats().rejections == {("mallory", "not_as_announced"): 1}
