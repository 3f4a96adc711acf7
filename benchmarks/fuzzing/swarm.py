"""Fuzzing of the node's announcement handling: ``Directory.read`` over hostile DHT shard values, and
``Inbox.consider`` / ``open`` / ``deliver`` / ``fail`` over decoded-but-hostile descriptors and
payloads, checked after every step.

Used by ``tests/test_fuzz.py`` and ``benchmarks/fuzz.py``. Each ``step(rng)`` returns the name of what
it did and raises ``Violation`` (``oracle.py``) when a property breaks:

- ``Directory.read`` never raises; it returns exactly the records that decode strictly and describe
  the peer whose key is in their subkey, refuses (by owner) the other records under a valid owner key,
  ignores everything else, and its cache of owner keys stays the size of one read.
- ``Inbox`` never raises; batches in flight or queued stay within the quota, count and byte limits;
  each batch (peer, round, created_at) is fetched at most once; what it remembers of refused or settled batches is
  forgotten within ``max_age_s + MAX_CLOCK_AHEAD_S`` (+ 1 s between prunes) of the last time it was
  considered or in flight, so its state is bounded by what peers announced in that window, whatever
  the dates they claim (a descriptor's ``created_at`` reaches 1e11, year ~5000; NaN cannot be represented:
  ``decode_announcement`` refuses it).
- ``Inbox.open`` returns a batch that passes ``check_batch`` or raises ``Rejected``, nothing else.
"""

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils.crypto import RSAPrivateKey
from hivemind.utils.timed_storage import ValueWithExpiration

from benchmarks.fuzzing.inputs import ANNOUNCEMENT_MUTATIONS, T0, mutate, seed_announcement, seed_batch
from benchmarks.fuzzing.oracle import Violation, check_announcement, check_batch, expect
from ftis.node.swarm.dht.directory import Directory
from ftis.node.swarm.exchange.inbox import MAX_CLOCK_AHEAD_S, Inbox
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.exchange.payload import Rejected
from ftis.node.swarm.keys.identity import IdentityError, peer_id_of_owner
from ftis.protocol import DecodeError, encode
from ftis.protocol.announcement import BatchDescriptor, decode_announcement, encode_announcement
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES, MAX_BATCH_TOKENS, MAX_GROUPS, MAX_PAYLOAD_BYTES, MAX_ROUND

INT64_MAX = (1 << 63) - 1
RUN_ID, TOKENIZER = "run-1", "sha256:abc"  # what ``seed_batch`` and ``seed_announcement`` carry


@dataclass(frozen=True)
class Owner:
    subkey: bytes  # ``[owner:ssh-rsa …]``: what hivemind's signature validator puts in a signed subkey
    peer_id: str


def make_owners(count: int) -> list[Owner]:
    subkeys = [RSASignatureValidator(RSAPrivateKey()).local_public_key for _ in range(count)]
    return [Owner(subkey, peer_id_of_owner(subkey)) for subkey in subkeys]


# --- Directory.read ---------------------------------------------------------------------------------


class DirectoryFuzz:
    def __init__(self, owners: list[Owner]):
        self.owners = owners
        self.directory = Directory()

    def _record(self, rng: random.Random, owner: Owner) -> object:
        """What a subkey's entry holds: valid for its owner, about another peer, mutated, or not bytes."""
        own = encode_announcement(seed_announcement(rng.randint(0, 3), peer_id=owner.peer_id))
        choice = rng.randrange(6)
        if choice == 0:
            return own
        if choice == 1:  # valid, but about another peer than the key that signed it
            other = rng.choice(self.owners).peer_id + rng.choice(["", "x"])
            return encode_announcement(seed_announcement(1, peer_id=other))
        if choice == 5:
            return rng.choice([None, 7, "text", [own], {"v": 1}, own.decode("latin-1"), bytearray(own)])
        return mutate(rng, [own], ANNOUNCEMENT_MUTATIONS)[1]

    def _subkey(self, rng: random.Random) -> object:
        owner = rng.choice(self.owners).subkey
        flipped = bytearray(owner)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        return rng.choice([owner, owner, owner, bytes(flipped), rng.randbytes(rng.randint(0, 40)),
                           b"[owner:" + rng.randbytes(20) + b"]", owner.decode(), 3, (owner,)])

    def _shard_value(self, rng: random.Random) -> object:
        choice = rng.randrange(8)
        if choice == 0:
            return None
        if choice == 1:  # the wrong shape altogether
            return ValueWithExpiration(rng.choice([b"plain", 1, "s", [1], None]), T0)
        entries = {}
        for _ in range(rng.randint(0, 6)):
            subkey = self._subkey(rng)
            owner = next((o for o in self.owners if o.subkey == subkey), rng.choice(self.owners))
            record = self._record(rng, owner)
            entries[subkey] = ValueWithExpiration(record, T0) if rng.random() < 0.9 else record
        return entries if choice == 2 else ValueWithExpiration(entries, T0)  # a bare dict has no .value

    def step(self, rng: random.Random) -> str:
        values = [self._shard_value(rng) for _ in range(rng.randint(0, 4))]
        try:
            reading = self.directory.read(values)
        except Exception as error:
            raise Violation(f"Directory.read raised {type(error).__name__}: {error}") from error
        accepted, refused = self._expected(values)
        got = sorted((a.peer_id, encode_announcement(a)) for a in reading.announcements)
        expect(got == sorted(accepted), f"Directory.read accepted {len(got)} records, expected {len(accepted)}")
        refused_by = sorted(peer for peer, _ in reading.rejected)
        expect(refused_by == sorted(refused), f"Directory.read refused {refused_by}, expected {sorted(refused)}")
        for announcement in reading.announcements:
            check_announcement(announcement, encode_announcement(announcement))
        subkeys = {subkey for value in values for subkey in _entries(value) if isinstance(subkey, bytes)}
        expect(set(self.directory._owners) <= subkeys, "the directory remembers owner keys it did not read now")
        return "directory_read"

    def _expected(self, values: list[object]) -> tuple[list[tuple[str, bytes]], list[str]]:
        """(peer id, announcement bytes) of the records to accept, and the peer ids of those to refuse."""
        owners = {o.subkey: o.peer_id for o in self.owners}
        accepted, refused = [], []
        for value in values:
            for subkey, entry in _entries(value).items():
                if isinstance(subkey, bytes) and subkey not in owners:
                    owners[subkey] = _owner_of(subkey)  # a key with a bit flipped may still be some RSA key
                if owners.get(subkey) is None:
                    continue
                record = entry.value if isinstance(entry, ValueWithExpiration) else None
                try:
                    announcement = decode_announcement(record) if type(record) is bytes else None
                except DecodeError:
                    announcement = None
                if announcement is not None and announcement.peer_id == owners[subkey]:
                    accepted.append((owners[subkey], encode_announcement(announcement)))
                else:
                    refused.append(owners[subkey])
        return accepted, refused


def _owner_of(subkey: bytes) -> str | None:
    try:
        return peer_id_of_owner(subkey)
    except IdentityError:
        return None


def _entries(value: object) -> dict:
    entries = value.value if isinstance(value, ValueWithExpiration) else None
    return entries if isinstance(entries, dict) else {}


# --- Inbox ------------------------------------------------------------------------------------------

LIMITS = InboxLimits(max_age_s=120.0, per_peer_quota=2, max_batches=5, max_bytes=64 * 1024)
FORGET_WITHIN_S = LIMITS.max_age_s + MAX_CLOCK_AHEAD_S + 1.0  # + 1 s: pruning runs at most once a second


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class InboxFuzz:
    def __init__(self, peers: int = 4):
        self.clock = Clock()
        self.inbox = Inbox(RUN_ID, TOKENIZER, LIMITS, self.clock)
        self.peers = [f"peer-{p}" for p in range(peers)]
        self.fetched: set[tuple[str, int, float]] = set()  # (peer, round, created_at) of every batch to fetch
        # (peer, round) -> the last time it was considered, or seen in flight or queued
        self.last_active: dict[tuple[str, int], float] = {}
        self.offered: dict[tuple[str, int], BatchDescriptor] = {}  # the batches to fetch
        self.payloads: dict[tuple[str, int, float], tuple[BatchDescriptor, bytes]] = {}

    def _descriptor(self, rng: random.Random, peer: str) -> BatchDescriptor:
        """A descriptor that ``decode_announcement`` accepts: an honest one with real bytes, or values at
        the edges of what it allows (as a hostile peer would sign them)."""
        round_ = rng.choice([rng.randrange(20), rng.randrange(20), MAX_ROUND, rng.randrange(MAX_ROUND)])
        if rng.random() < 0.5:
            created_at = float(int(self.clock.now) - rng.choice([0, 10, 30]))
            return self._honest(peer, round_, created_at)[0]
        return BatchDescriptor(
            round=round_, groups=rng.choice([1, MAX_GROUPS]), tokens=rng.choice([1, MAX_BATCH_TOKENS]),
            bytes=rng.choice([1, LIMITS.max_bytes, LIMITS.max_bytes + 1, MAX_PAYLOAD_BYTES]),
            sha256=rng.randbytes(32), policy_version=rng.choice([0, INT64_MAX]),
            created_at=rng.choice([0.0, self.clock.now - LIMITS.max_age_s - 1, self.clock.now,
                                   self.clock.now + MAX_CLOCK_AHEAD_S + 1, self.clock.now + 1e6, 1e11]),
        )

    def _announce(self, rng: random.Random) -> str:
        peer = rng.choice(self.peers)
        descriptors = {}
        for _ in range(rng.randint(1, MAX_ANNOUNCED_BATCHES)):
            descriptor = self._descriptor(rng, peer)
            descriptors[descriptor.round] = descriptor
        fields = dict(peer_id=peer, run_id=rng.choice([RUN_ID, RUN_ID, "run-2"]),
                      tokenizer=rng.choice([TOKENIZER, TOKENIZER, "sha256:other"]))
        announced = replace(seed_announcement(0, **fields), batches=tuple(descriptors.values()))
        announcement = decode_announcement(encode_announcement(announced))  # only what the wire can carry
        for descriptor in announcement.batches:
            key = (peer, descriptor.round)
            self.last_active[key] = self.clock.now
            if self._call(self.inbox.consider, announcement, descriptor):
                batch = (*key, descriptor.created_at)  # a peer may reuse a round (a restart) once it is forgotten
                expect(batch not in self.fetched, f"{batch} was to be fetched twice")
                self.fetched.add(batch)
                self.offered[key] = descriptor
        self._check_seen()
        return "inbox_announce"

    def _honest(self, peer: str, round_: int, created_at: float) -> tuple[BatchDescriptor, bytes]:
        """The honest descriptor and payload of (peer, round, created_at), made once (making them dominates)."""
        key = (peer, round_, created_at)
        if key not in self.payloads:
            if len(self.payloads) > 1000:
                self.payloads.clear()
            batch = seed_batch(peer_id=peer, round=round_, created_at=created_at)
            data = encode(batch)
            self.payloads[key] = BatchDescriptor(round_, len(batch.groups), batch.num_completion_tokens, len(data),
                                                 hashlib.sha256(data).digest(), batch.policy.policy_version,
                                                 created_at), data
        return self.payloads[key]

    def _payload(self, rng: random.Random, peer: str, descriptor: BatchDescriptor) -> bytes:
        """What the peer sends when asked: the honest bytes, or corrupt ones if it announced other bytes."""
        data = self._honest(peer, descriptor.round, descriptor.created_at)[1]
        return data if hashlib.sha256(data).digest() == descriptor.sha256 else mutate(rng, [data])[1]

    def _settle(self, rng: random.Random) -> str:
        """A fetch in flight ends: its payload opened and delivered, or the fetch failed."""
        in_flight = sorted(self.inbox._in_flight)
        if not in_flight:
            return "inbox_idle"
        key = rng.choice(in_flight)
        descriptor = self.offered[key]
        data = self._payload(rng, key[0], descriptor)
        if rng.random() < 0.2:
            self._call(self.inbox.fail, key[0], descriptor, "fetch_failed")
            return "inbox_fail"
        try:
            batch = self.inbox.open(key[0], descriptor, data)
        except Rejected as rejected:
            self._call(self.inbox.fail, key[0], descriptor, rejected.reason)
            return "inbox_rejected_payload"
        except Exception as error:
            raise Violation(f"Inbox.open raised {type(error).__name__}: {error}") from error
        check_batch(batch, data)
        self._call(self.inbox.deliver, key[0], descriptor, batch, len(data))
        return "inbox_deliver"

    def step(self, rng: random.Random) -> str:
        choice = rng.randrange(10)
        if choice < 5:
            kind = self._announce(rng)
        elif choice < 8:
            kind = self._settle(rng)
        elif choice == 8:
            self._call(self.inbox.drain, rng.choice([None, 1]))
            kind = "inbox_drain"
        else:
            self.clock.now += rng.choice([0.5, 5.0, 60.0, 300.0])
            self._call(self.inbox.reject_announcement, rng.choice(self.peers), rng.randbytes(8))
            kind = "inbox_time_passes"
        self._check_bounds()
        return kind

    @staticmethod
    def _call(method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as error:
            raise Violation(f"Inbox.{method.__name__} raised {type(error).__name__}: {error}") from error

    def _check_bounds(self) -> None:
        inbox = self.inbox
        pending = inbox._held
        expect(len(pending) <= LIMITS.max_batches, f"{len(pending)} batches in flight or queued")
        expect(sum(pending.values()) <= LIMITS.max_bytes, f"{sum(pending.values())} bytes in flight or queued")
        expect(pending.bytes == sum(pending.values()),
               f"the buffer counts {pending.bytes} bytes and holds {sum(pending.values())}")
        for peer in self.peers:
            count = sum(1 for p, _ in pending if p == peer)
            expect(count <= LIMITS.per_peer_quota, f"{peer} has {count} batches in flight or queued")
        expect(set(inbox._in_flight) <= set(pending), "a batch in flight is not counted against the limits")
        expect(inbox._seen.deferred <= set(inbox._seen), "a deferred batch is not remembered")
        expect(set(inbox._seen.watermarks) <= set(self.peers), "the inbox remembers peers that never announced")
        expect(len(inbox.scores()) <= len(self.peers), "the inbox scores peers that never announced")
        self.last_active.update(dict.fromkeys(pending, self.clock.now))

    def _check_seen(self) -> None:
        """Right after a consider (pruning ran within the last second): every remembered batch is in flight
        or queued, or was considered or in flight within FORGET_WITHIN_S."""
        horizon = self.clock.now - FORGET_WITHIN_S
        for key in self.inbox._seen:
            expect(key in self.inbox._held or self.last_active[key] >= horizon,
                   f"{key} is still remembered {self.clock.now - self.last_active[key]:.0f} s after it was last "
                   "considered or in flight")
