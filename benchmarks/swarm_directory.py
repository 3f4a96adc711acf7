"""A sampled read of a large run's directory on the real engine: bytes per poll, flat in the number of records.

Run (from the repo root):  python -m benchmarks.swarm_directory [--records 256,1024,4096] [--servers 4] [--quick]
--quick: 256 and 1,024 records (the keys of 1,024 virtual peers: ~1–2 min to make the first time, then cached);
--polls P: polls measured per case (default 8); --keys FILE: the RSA key cache (default runs/swarm_directory/
keys.bin; generating 4,096 RSA-2048 keys takes minutes once).

Per number of records R: ``--servers`` hivemind DHT server processes on 127.0.0.1, every one with the run's
validators (``records.record_validators``: signature, schema, lifetime; S = R / 16 shards, 16 records each),
hold R signed, schema-valid announcements of virtual peers: each an RSA key (cached on disk), its peer id,
a 16-batch announcement (~2.2 KB; ~3 KB stored with the key subkey and the signature) stored in its shard
(``records.shard_of``) by one of the servers, which signs each with the virtual peer's key. A reader (a DHT
client, so it holds no replica and reads everything from the servers) then polls as a node of a large run
does, with the node's code: ``sampling.Sampler`` chooses the next K = 4 shards of its own order,
``directory.read_shards`` reads them in one traversal, ``directory.Directory`` checks every record (signed by
the peer it names). The bytes are counted from the DHT's answers, inside the reader's DHT process (the
protobuf size of each ``rpc_find`` response), at a beam of 2 and at hivemind's default (20).

Printed per R: shards, records valid, then per beam: answers and MB per poll (mean over the polls), the read's
wall time p50, and beside it what reading all S shards costs once. Goal: bytes per poll flat from 256 to 4,096
records: none more than 10% above the smallest run's (the spread is printed too).
"""

import argparse
import os
import random
import re
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import hivemind
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.validation import DHTRecord
from hivemind.utils import get_dht_time
from hivemind.utils.crypto import RSAPrivateKey

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.directory import Directory, read_shards
from ftis.node.swarm.dht.records import record_validators, shard_key, shard_of
from ftis.node.swarm.dht.sampling import Sampler, read_settings
from ftis.node.swarm.keys.identity import peer_id_of_owner
from ftis.protocol.announcement import Announcement, BatchDescriptor, encode_announcement

RECORDS_PER_SHARD = 16
PER_POLL = 4  # K: shards a poll reads (the measurement: 4 shards of 16 records)
TTL_S = 250.0  # the records' lifetime: within records.latest_expiration()
DEFAULT_KEYS = Path("runs/swarm_directory/keys.bin")


class VirtualSigners(RSASignatureValidator):
    """The signature validator of a DHT peer that stores records for many virtual peers: it signs each record
    with the key of the owner its subkey names (validation is hivemind's, unchanged)."""

    _OWNER = re.compile(rb"\[owner:[^\]]+\]")

    def __init__(self, keys: list[RSAPrivateKey]):
        super().__init__(keys[0])
        self._keys = {RSASignatureValidator(key).local_public_key: key for key in keys}

    def sign_value(self, record: DHTRecord) -> bytes:
        found = self._OWNER.search(record.subkey)
        key = self._keys.get(found.group(0)) if found else None
        if key is None:
            return record.value
        signature = key.sign(self._serialize_record(record))
        return record.value + self.SIGNATURE_FORMAT.replace(b"_value_", signature)


def load_keys(path: Path, count: int) -> list[RSAPrivateKey]:
    """``count`` RSA keys, from the cache at ``path``, made (and added to it) when it holds fewer."""
    from cryptography.hazmat.primitives import serialization

    keys: list[RSAPrivateKey] = []
    if path.exists():
        data = path.read_bytes()
        at = 0
        while at < len(data) and len(keys) < count:
            size = int.from_bytes(data[at : at + 4], "big")
            key = RSAPrivateKey.__new__(RSAPrivateKey)
            key._private_key = serialization.load_der_private_key(data[at + 4 : at + 4 + size], password=None)
            keys.append(key)
            at += 4 + size
    if len(keys) < count:
        started, had = time.perf_counter(), len(keys)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as cache:
            for _ in range(count - len(keys)):
                key = RSAPrivateKey()
                der = key.to_bytes()
                cache.write(len(der).to_bytes(4, "big") + der)
                keys.append(key)
        print(f"made {count - had} RSA keys in {time.perf_counter() - started:.0f} s (cached in {path})", flush=True)
    return keys[:count]


def announcement_of(run_id: str, peer_id: str, rng: random.Random, now: float) -> bytes:
    """A full announcement: 16 batches, as a busy node lists them."""
    batches = tuple(BatchDescriptor(round=1000 + i, groups=8, tokens=rng.randrange(500, 5000),
                                    bytes=rng.randrange(3_000, 300_000), sha256=rng.randbytes(32), policy_version=i,
                                    created_at=now - 10.0 * (16 - i)) for i in range(16))
    return encode_announcement(Announcement(
        run_id=run_id, peer_id=peer_id, model="Qwen/Qwen2.5-1.5B-Instruct", adapter="full",
        tokenizer="qwen2-" + "f" * 56, policy_version=15, published_batches=1234, published_tokens=4_567_890,
        updated_at=now, batches=batches))


async def _count_answers(_dht: hivemind.DHT, node) -> None:
    """Runs in the reader's DHT process: count every ``rpc_find`` answer and its size from now on."""
    protocol = node.protocol
    original = protocol.get_stub
    counts = protocol.ftis_counts = {"answers": 0, "bytes": 0}

    class Counting:
        def __init__(self, stub):
            self._stub = stub

        def __getattr__(self, name):
            return getattr(self._stub, name)

        async def rpc_find(self, request, *args, **kwargs):
            response = await self._stub.rpc_find(request, *args, **kwargs)
            counts["answers"] += 1
            counts["bytes"] += response.ByteSize()
            return response

    protocol.get_stub = lambda peer: Counting(original(peer))


async def _counts(_dht: hivemind.DHT, node) -> dict[str, int]:
    return dict(node.protocol.ftis_counts)


def start_servers(count: int, validators_of, scratch: Path) -> list[hivemind.DHT]:
    first = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"], record_validators=validators_of(0))
    peers = [str(m) for m in first.get_visible_maddrs()]
    others = [hivemind.DHT(start=False, host_maddrs=["/ip4/127.0.0.1/tcp/0"], initial_peers=peers,
                           record_validators=validators_of(i)) for i in range(1, count)]
    for dht in others:
        dht.run_in_background(await_ready=False)
    for dht in others:
        dht.wait_until_ready(timeout=60)
    return [first, *others]


def measure(records: int, servers: int, polls: int, keys: list[RSAPrivateKey], seed: int) -> list[dict]:
    shards = records // RECORDS_PER_SHARD
    run_id = f"directory-{records}-{os.getpid()}"
    config = SwarmConfig(run_id=run_id, shards=shards, shards_per_poll=PER_POLL)
    rng = random.Random(seed)
    scratch = Path(tempfile.mkdtemp(prefix="ftis-directory-"))
    signers = VirtualSigners(keys[:records])

    def validators_of(index: int):
        validators = record_validators(run_id, shards, None)
        return [signers, *validators[1:]] if index == 0 else validators

    # The records travel to the storing server by fork, not through its command pipe: a large call through that
    # pipe kills the DHT process (DESIGN.md, "Large DHT.store values").
    now, expiration = time.time(), get_dht_time() + TTL_S
    owners = [RSASignatureValidator(key).local_public_key for key in keys[:records]]
    _TO_STORE.clear()
    for owner in owners:
        peer_id = peer_id_of_owner(owner)
        key = shard_key(run_id, shard_of(peer_id, shards))
        _TO_STORE.append((key, owner, announcement_of(run_id, peer_id, rng, now)))
    dhts = start_servers(servers, validators_of, scratch)
    reader = None
    try:
        started = time.perf_counter()
        stored = 0
        for at in range(0, records, 256):  # one store_many per slice
            stored += dhts[0].run_coroutine(partial(_store_slice, start=at, stop=at + 256, expiration=expiration))
        store_s = time.perf_counter() - started
        reader = hivemind.DHT(start=True, client_mode=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                              initial_peers=[str(m) for m in dhts[-1].get_visible_maddrs()],
                              record_validators=record_validators(run_id, shards, None))
        reader.run_coroutine(_count_answers)
        rows = []
        full = _read(reader, run_id, shards, None, None)
        for beam in (2, None):
            sampler: Sampler[object] = Sampler(read_settings(config), random.Random(seed))
            per_poll = []
            for _ in range(polls):
                per_poll.append(_read(reader, run_id, shards, sampler.shards_to_read(), beam))
            rows.append({
                "records": records, "shards": shards, "stored": stored, "store_s": store_s, "beam": beam or 20,
                "valid": statistics.fmean(p["valid"] for p in per_poll),
                "answers": statistics.fmean(p["answers"] for p in per_poll),
                "bytes": statistics.fmean(p["bytes"] for p in per_poll),
                "read_ms": 1e3 * statistics.median(p["seconds"] for p in per_poll),
                "full_bytes": full["bytes"], "full_answers": full["answers"], "full_valid": full["valid"],
            })
        return rows
    finally:
        for dht in ([reader] if reader is not None else []) + dhts:
            dht.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


_TO_STORE: list[tuple[str, bytes, bytes]] = []  # (key, subkey, value) of each record, set before the servers fork


async def _store_slice(_dht: hivemind.DHT, node, start: int, stop: int, expiration: float) -> int:
    """Runs in the storing server: store records ``start:stop`` of ``_TO_STORE``; how many were stored."""
    keys, subkeys, values = zip(*_TO_STORE[start:stop], strict=True)
    done = await node.store_many(list(keys), list(values), expiration, subkeys=list(subkeys))
    return sum(bool(done.get((key, subkey))) for key, subkey in zip(keys, subkeys, strict=True))


def _read(reader: hivemind.DHT, run_id: str, shards: int, only, beam) -> dict:
    before = reader.run_coroutine(_counts)
    started = time.perf_counter()
    values = read_shards(reader, run_id, shards, only=only, beam_size=beam).result()
    seconds = time.perf_counter() - started
    after = reader.run_coroutine(_counts)
    valid = len(Directory().read(values).announcements)
    return {"answers": after["answers"] - before["answers"], "bytes": after["bytes"] - before["bytes"],
            "seconds": seconds, "valid": valid}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", default=None, help="default 256,1024,4096; quick 256,1024")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--polls", type=int, default=8)
    parser.add_argument("--keys", type=Path, default=DEFAULT_KEYS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in (args.records or ("256,1024" if args.quick else "256,1024,4096")).split(",")]
    keys = load_keys(args.keys, max(sizes))
    print(f"directory reads on {args.servers} DHT servers (hivemind {hivemind.__version__}), {RECORDS_PER_SHARD} "
          f"records a shard, K = {PER_POLL} shards a poll (the node's Sampler), {args.polls} polls per case")
    print("| records | shards | stored | beam | valid per poll | answers per poll | MB per poll | read p50 ms | "
          "all shards: MB, answers |")
    print("|---|---|---|---|---|---|---|---|---|")
    per_beam: dict[int, list[float]] = {}
    for records in sizes:
        for row in measure(records, args.servers, args.polls, keys, args.seed):
            print(f"| {row['records']:,} | {row['shards']} | {row['stored']:,} in {row['store_s']:.1f} s | "
                  f"{row['beam']} | {row['valid']:.1f} | {row['answers']:.1f} | {row['bytes'] / 1e6:.2f} | "
                  f"{row['read_ms']:.0f} | {row['full_bytes'] / 1e6:.1f}, {row['full_answers']} "
                  f"({row['full_valid']} valid) |", flush=True)
            per_beam.setdefault(row["beam"], []).append(row["bytes"])
    for beam, figures in per_beam.items():
        if len(figures) > 1:
            ratios = [f / figures[0] for f in figures]
            print(f"beam {beam}: bytes per poll against {sizes[0]:,} records: "
                  + ", ".join(f"{ratio:.2f}" for ratio in ratios)
                  + f" (goal: none above 1.10, the read does not grow: {'met' if max(ratios) <= 1.10 else 'MISSED'}; "
                  f"spread {100 * (max(figures) - min(figures)) / min(figures):.0f}%)")

if __name__ == "__main__":
    main()
