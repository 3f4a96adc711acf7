"""Hostile peers on the in-memory transport: any bytes, published under any peer's name.

A ``MemoryHub`` (``node/swarm/memory.py``) fetches payloads by round from the object that joined under a peer's name,
and holds any announcement bytes a test stores for it. ``RawPeer`` stands where a peer's ``Outbox`` stands: it
announces (a record of its own making) and serves whatever it is given (a valid batch, one no peer should ever
send, bytes that are no batch at all), with any descriptor fields (``Case.changes``: a lie about the counts, the
date, the size). So the node under test sees what it would see from a member of a real swarm that bypassed its own
outbox and signs what it likes: an announcement, then whatever payload its peer serves
(``tests/helpers/hostile_peer.py`` does the same on the real hivemind swarm).

``Identities`` hands out peer ids (hundreds of them, some with odd characters) and each one's next round, so that
every (peer, round) a fuzz run publishes is new to the node; a muted one is replaced by a new name, as a Sybil
would, so the cases keep reaching past the inbox (and the node's tables of peers meet thousands of names).
"""

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import msgpack

from ftis.protocol import read
from ftis.protocol.announcement import Announcement, BatchDescriptor, Reach, encode_announcement
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES, MAX_PAYLOAD_BYTES, MAX_ROUND


@dataclass(frozen=True)
class Case:
    """One hostile batch: what a maker (``hostile.py``) built, as its peer serves it."""

    kind: str  # the maker's name, and its variant ("long_completions/128x8192")
    peer_id: str
    round: int  # the round its descriptor lists (the batch's own, where it has one)
    payload: bytes
    tokenizer: str  # the fingerprint its peer announces
    created_at: float  # ...and the creation time its descriptor says
    changes: dict = field(default_factory=dict)  # descriptor fields that differ from the payload's truth


def describe(case: Case) -> BatchDescriptor:
    """The descriptor a peer announces for ``case``: the payload's true size, hash and counts where it reads as a
    batch (read only: the payload may be a bomb), then ``case.changes``."""
    try:
        batch = read(case.payload)
        counts = dict(groups=len(batch.layout.group_ids), tokens=batch.layout.num_logprobs,
                      policy_version=batch.header.policy.policy_version)
    except Exception:  # no batch at all (the node's own read of it is what the fuzzer judges)
        counts = dict(groups=1, tokens=1, policy_version=0)
    descriptor = BatchDescriptor(round=case.round, bytes=len(case.payload),
                                 sha256=hashlib.sha256(case.payload).digest(), created_at=case.created_at, **counts)
    return replace(descriptor, **case.changes)


class RawPeer:
    """A hostile peer in a ``MemoryHub``: serves its listed cases' payloads, and announces them in a record of its
    own making (``record``), as a peer that signs whatever it likes would store in the DHT."""

    def __init__(self, run_id: str, peer_id: str, clock: Callable[[], float] = time.time):
        self.run_id, self.peer_id, self._clock = run_id, peer_id, clock
        self.tokenizer = "none"
        self._listed: OrderedDict[int, tuple[BatchDescriptor, bytes]] = OrderedDict()  # round -> (descriptor, bytes)

    def list(self, case: Case) -> None:
        self.tokenizer = case.tokenizer
        descriptor = describe(case)
        self._listed[descriptor.round] = (descriptor, case.payload)
        while len(self._listed) > MAX_ANNOUNCED_BATCHES:
            self._listed.popitem(last=False)

    def announcement(self) -> None:
        """Nothing for the hub to encode (``Outbox.announcement``'s place): the hub holds this peer's ``record``."""
        return None

    def record(self) -> bytes:
        """The announcement of the listed cases, their descriptors exactly as listed: one the protocol cannot carry
        (a payload of 0 bytes) is written into the record's bytes, which the node then reads (and refuses)."""
        batches = [descriptor for descriptor, _ in self._listed.values()]
        carried = [replace(d, bytes=min(max(d.bytes, 1), MAX_PAYLOAD_BYTES)) for d in batches]
        announcement = Announcement(run_id=self.run_id, peer_id=self.peer_id, model="hostile", adapter="full",
                                    tokenizer=self.tokenizer, policy_version=0, published_batches=len(batches),
                                    published_tokens=sum(d.tokens for d in batches), updated_at=self._clock(),
                                    batches=tuple(carried), reach=Reach("direct"))
        data = encode_announcement(announcement)
        if carried == batches:
            return data
        message = msgpack.unpackb(data, raw=False)
        for listed, descriptor in zip(message["body"]["batches"], batches, strict=True):
            listed["bytes"] = descriptor.bytes
        return msgpack.packb(message, use_bin_type=True)

    def payload(self, round_: int) -> bytes | None:
        entry = self._listed.get(round_)
        return entry[1] if entry else None


# Names a hostile peer may take besides the plain ones: as long as the protocol allows, odd characters.
ODD_NAMES = ("\u202eevil\u202c", "nul\x00peer", "e\u0301\u0301\u0301", "\U0001f608" * 4, "x" * 256, " ", "a/b/c",
             "\ufeffbom", "тест", "名前")


class Identities:
    """The hostile peers' names, taken in turn, and each one's next round."""

    def __init__(self, count: int):
        self._names = [*(f"mallory-{k:04d}" for k in range(count - len(ODD_NAMES))), *ODD_NAMES]
        self._next_round: dict[str, int] = {}
        self._turn = 0
        self._renamed = 0

    def take(self) -> str:
        name = self._names[self._turn % len(self._names)]
        self._turn += 1
        return name

    def round_of(self, peer_id: str) -> int:
        return self._next_round.get(peer_id, 0)

    def used(self, peer_id: str, round_: int) -> None:
        """``peer_id`` listed a batch of ``round_``: its next one is later. A peer that reached the protocol's last
        rounds is replaced by a new name (a (peer, round) is never listed twice)."""
        self._next_round[peer_id] = max(self.round_of(peer_id), round_ + 1)
        if self._next_round[peer_id] > MAX_ROUND - MAX_ANNOUNCED_BATCHES:
            self.retire(peer_id)

    def retire(self, peer_id: str) -> None:
        """Replace ``peer_id`` by a new name (a Sybil's next identity: one the node muted is fetched no more)."""
        if peer_id in self._names:
            self._renamed += 1
            self._names[self._names.index(peer_id)] = f"{self._renamed}~{peer_id.split('~')[-1]}"[:256]
            self._next_round.pop(peer_id, None)
