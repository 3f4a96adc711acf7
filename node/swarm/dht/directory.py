"""Reading a run's announcements out of the DHT: each entry of a shard key is a signed subkey (the
owner's public key) and an announcement. An announcement counts only if it decodes strictly,
describes the very peer whose key signed it (its peer id derives from that key), and expires no later
than an honest peer's would (``expires_by``).

The shard keys a poll reads (all of them, or the sample ``sampling.Sampler`` chose) are read in one DHT
traversal (``read_shards``, run inside the DHT process): one ``get`` per shard would ask the same nearby
peers once per key. Measured with 3 peers polling every 0.5 s on 127.0.0.1: 17% of a core against 25–30%
with 4 shards, 23% against 44% with 8. ``beam_size`` bounds how many DHT peers the traversal keeps asking
near each key (hivemind's default, 20, when None): with ``latest=True`` every one of them that holds a copy
answers with the whole dictionary, so a beam just wide enough to find the key's replicas costs a fraction.
"""

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import hivemind
from hivemind.dht import DHTNode
from hivemind.utils.mpfuture import MPFuture

from ftis.node.swarm.dht.records import all_shard_keys, shard_key
from ftis.node.swarm.keys.identity import IdentityError, peer_id_of_owner
from ftis.node.swarm.transport import Member, member_of
from ftis.protocol import DecodeError
from ftis.protocol.announcement import Announcement, decode_announcement


@dataclass(frozen=True)
class Reading:
    announcements: list[Announcement]
    records: list[bytes]  # the wire bytes of each announcement
    rejected: list[tuple[str, bytes]]  # (peer id, its record) for invalid entries


class Directory:
    def __init__(self) -> None:
        self._owners: dict[bytes, str | None] = {}  # subkey -> the peer id its key proves (None: invalid)

    def read(self, shard_values: Iterable[object], expires_by: float = float("inf")) -> Reading:
        """Announcements from the values a DHT ``get`` returned for the shard keys (None if absent); an entry
        whose DHT expiration is later than ``expires_by`` (DHT time) is rejected."""
        # Owners are remembered from one read to the next, and only those of subkeys read again: the
        # cache stays the size of one read, however many keys come and go over a long run.
        known, self._owners = self._owners, {}
        announcements, records, rejected = [], [], []
        for value in shard_values:
            entries = getattr(value, "value", None)
            if not isinstance(entries, dict):
                continue
            for subkey, entry in entries.items():
                owner = self._owner(subkey, known)
                if owner is None:
                    continue  # no key, no way to blame anyone: the DHT's validators keep these out anyway
                record = getattr(entry, "value", None)
                announcement = _decode(record)
                expiration = getattr(entry, "expiration_time", None)
                lasting = isinstance(expiration, int | float) and expiration <= expires_by
                if announcement is None or announcement.peer_id != owner or not lasting:
                    rejected.append((owner, record if isinstance(record, bytes) else repr(record).encode()))
                else:
                    announcements.append(announcement)
                    records.append(record)
        return Reading(announcements, records, rejected)

    def _owner(self, subkey: object, known: dict[bytes, str | None]) -> str | None:
        if not isinstance(subkey, bytes):
            return None
        if subkey not in self._owners:
            self._owners[subkey] = known[subkey] if subkey in known else _proven_peer_id(subkey)
        return self._owners[subkey]


def _proven_peer_id(subkey: bytes) -> str | None:
    try:
        return peer_id_of_owner(subkey)
    except IdentityError:
        return None


def _decode(value: object) -> Announcement | None:
    if not isinstance(value, bytes):
        return None
    try:
        return decode_announcement(value)
    except DecodeError:
        return None


async def _latest_values(_dht: hivemind.DHT, node: DHTNode, keys: Sequence[str],
                         beam_size: int | None = None) -> list[object]:
    """Runs in the DHT process: the latest value of each key (None if absent), one traversal for all."""
    # inf: the latest, as get(latest=True)
    found = await node.get_many(keys, sufficient_expiration_time=float("inf"), beam_size=beam_size)
    return [found.get(key) for key in keys]


def read_shards(dht: hivemind.DHT, run_id: str, shards: int, only: Sequence[int] | None = None,
                beam_size: int | None = None) -> MPFuture:
    """Start reading a run's shard keys in one traversal: all ``shards`` of them, or those numbered in ``only``.
    The future (await it, or ``.result()``) holds each key's value, or None, in that order."""
    keys = all_shard_keys(run_id, shards) if only is None else [shard_key(run_id, shard) for shard in only]
    return dht.run_coroutine(partial(_latest_values, keys=keys, beam_size=beam_size), return_future=True)


# Shards the readers outside the training loop (``ftis-node status``, the dashboard, the bootstrap's log line)
# read by default: every shard of a run of up to 16, and of a larger one 16 drawn at random (~256 records at the
# planned 16 a shard, under a megabyte), whose member count is scaled up to an estimate of the whole run's.
READER_SHARDS = 16


@dataclass(frozen=True)
class MembersReading:
    members: list[Member]  # the members announcing in the shards read, by peer id
    shards_read: int
    shards: int

    @property
    def complete(self) -> bool:
        return self.shards_read == self.shards

    @property
    def estimated_total(self) -> int:
        """The run's members: those read, scaled by the share of shards read (peers spread evenly over them)."""
        return round(len(self.members) * self.shards / self.shards_read) if self.shards_read else 0

    def summary(self) -> str:
        """"read all 4 shards of the run", or "read 16 of 625 shards at random: ~9,994 members in all"."""
        if self.complete:
            return f"read all {self.shards} shard{'s' if self.shards != 1 else ''} of the run"
        return (f"read {self.shards_read} of {self.shards} shards at random: ~{self.estimated_total:,} members "
                f"in all (estimated)")


def read_members(dht: hivemind.DHT, run_id: str, shards: int, timeout: float | None = None,
                 beam_size: int | None = None, sample: int = 0, rng: random.Random | None = None) -> MembersReading:
    """The run's members now (blocking: for readers like ``ftis-node status`` and the dashboard). ``sample``: read
    that many shards drawn at random (0, or at least ``shards``: every shard; in a large run every shard is every
    record, times the copies the ``beam_size`` meets: ~3 KB × N × a few). ``TimeoutError`` after ``timeout``
    seconds (None: no limit)."""
    only = None if sample <= 0 or sample >= shards else sorted((rng or random.Random()).sample(range(shards), sample))
    values = read_shards(dht, run_id, shards, only=only, beam_size=beam_size).result(timeout=timeout)
    members = sorted((member_of(a) for a in Directory().read(values).announcements), key=lambda m: m.peer_id)
    return MembersReading(members, shards if only is None else len(only), shards)

