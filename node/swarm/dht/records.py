"""Where a run's announcements live in the DHT, and the validators that protect them.

Each run has ``shards`` DHT keys; a peer writes its announcement under the key of its shard
(a hash of its peer id), in a subkey that carries its RSA public key, so hivemind's signature
validator lets only that peer write it. A schema validator on the same keys refuses anything but
``{subkey: bytes}`` entries whose subkey is exactly one owner marker (so one key signs one subkey, not
any number of padded ones) and whose value is at most an announcement's size, so no peer can replace
a whole shard with a plain value or fill it alone; it refuses every key that is not one of the run's
shard keys (the run's DHT stores nothing else). A third validator refuses a record that expires
later than any peer may keep its announcement (``latest_expiration``). Every node, bootstrap peers
included, installs all three (docs/swarm.md), so such records are neither stored nor passed on.

Sharding keeps what one DHT answer carries below hivemind's 4 MiB message limit. A full record is
about 3 KB (a 16-batch announcement of ~2.2 KB, the 391-byte subkey with the public key, the
356-byte signature), so 4 MiB is ~1,400 records. The shards a poll reads are read in one traversal
(``directory.read_shards``), in which hivemind asks each DHT peer for ⌊√n⌋ of the n keys per request
and gets them back in one answer: with the default 4 shards, two shards share an answer, so each
holds ~700 peers and the run ~2,800. Read all at once, shards are not free: 4 cost about what 2 do (two
requests per DHT peer asked), 8 about twice what 1 does. A large run has ~16 records a shard and reads a few
shards a poll (``sampling.py``, ``SwarmConfig.shards_per_poll``), so what a read costs stays the same whatever
the run's size.
"""

import hashlib

import pydantic.v1 as pydantic_v1
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.schema import SchemaValidator, conbytes
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import get_dht_time
from hivemind.utils.crypto import RSAPrivateKey

from ftis.protocol.limits import MAX_ANNOUNCEMENT_BYTES, MAX_ANNOUNCEMENT_TTL_S, MAX_CLOCK_AHEAD_S

# A subkey that is one owner marker and nothing else: "[owner:<public key>]" (hivemind writes the key in
# OpenSSH form, which holds no "]"; an RSA-2048 one is ~380 bytes).
OwnerSubkey = conbytes(regex=rb"\A\[owner:[^\]]+\]\Z", max_length=2048, strict=True)
Announcement = conbytes(max_length=MAX_ANNOUNCEMENT_BYTES, strict=True)


def run_prefix(run_id: str) -> str:
    """The DHT key prefix of a run: a hash, so any run id makes a valid schema field name."""
    return "ftis_" + hashlib.blake2b(run_id.encode(), digest_size=8).hexdigest()


def shard_of(peer_id: str, shards: int) -> int:
    return int.from_bytes(hashlib.blake2b(peer_id.encode(), digest_size=4).digest(), "big") % shards


def shard_key(run_id: str, shard: int) -> str:
    return f"{run_prefix(run_id)}_peers_{shard}"


def all_shard_keys(run_id: str, shards: int) -> list[str]:
    return [shard_key(run_id, shard) for shard in range(shards)]


def record_validators(run_id: str, shards: int, key: RSAPrivateKey | None) -> list[RecordValidatorBase]:
    """The signature and schema validators for a run's announcement keys. ``key`` signs this peer's
    own records (a fresh key when None: a peer that never announces, like a bootstrap)."""
    fields = {f"peers_{shard}": (dict[OwnerSubkey, Announcement] | None, None) for shard in range(shards)}
    schema = pydantic_v1.create_model("AnnouncementKeys", **fields)
    signature = RSASignatureValidator(key if key is not None else RSAPrivateKey())
    return [signature, SchemaValidator(schema, allow_extra_keys=False, prefix=run_prefix(run_id)), _Lifetime()]


def latest_expiration() -> float:
    """The latest DHT expiration time a run's record may carry now: a peer's TTL, plus a clock's lead."""
    return get_dht_time() + MAX_ANNOUNCEMENT_TTL_S + MAX_CLOCK_AHEAD_S


class _Lifetime(RecordValidatorBase):
    """Refuses records that expire later than ``latest_expiration()``: stored for a year, a member's record
    would outlive it (the schema validator already refuses every key but the run's shard keys)."""

    def validate(self, record: DHTRecord) -> bool:
        return record.expiration_time <= latest_expiration()
