"""The sampled directory and the fetch budget, simulated at 100, 1,000 and 10,000 peers on one core.

Run (from the repo root):  python -m benchmarks.swarm_policy [--quick] [--peers 100,1000,10000] [--seconds S]
--quick: 100 and 1,000 peers for 45 simulated seconds each, honest swarm only (seconds; run by
tests/test_benchmarks.py); the default: 100, 1,000 and 10,000 peers for 120 s, honest, then with churn, then
with hostile peers (about 10 minutes on one core, most of it the 10,000).
--budget B, --seed, --seconds override the choices below.

Pure Python, no network: every peer is a node of this simulation, and its reads and fetch choices are made
by the node's own code, imported, not copied: ``sampling.read_settings`` (the settings, validated),
``sampling.Sampler`` (which shards a poll reads, what the last polls returned), ``budget.rank_offers`` and
``budget.pick`` (the fetch budget: freshest first, better-scored first, random among equals, one batch per
peer) and, with hostile peers, ``reputation.Reputation`` (scores and mutes). What the simulation supplies is
the world: shards (hash of the peer, mod S), records that become readable ``STORE_DELAY_S`` after a publish,
fetches that succeed at once or fail (a departed or hostile peer), a trainer step that takes what was
fetched.

The swarm of N: S = round(N / 16) shards (16 records each), every peer polls every ``POLL_S`` (its own
phase) reading K = 2 shards of its own order, remembers the last 4 polls (~128 peers), reads more (up to 8
shards) while it remembers fewer than 32; it steps every ``STEP_S`` (its own phase): publishes one batch and
hands what it fetched to its trainer, which frees the budget of B batches (default 8: ``mix.max_peer_groups``
32 over 4 groups a batch). A fetch takes no time; the figures count from ``WARMUP_S`` on.

Figures per N (the goals of docs/swarm.md, "How a node reads a large swarm"):
- read bytes per second per node: records read × ``RECORD_BYTES`` × ``COPIES_PER_KEY`` (measured on hivemind
  1.1.12 with a beam of 2: each key's dictionary arrives ~4 times), flat within 10% across N; beside it what
  reading every shard would cost, min(N, 20) × 3 KB × N per poll;
- steps that got their budget (all B) — goal: every step (a joiner's first step, before it read anything,
  is not counted);
- batch age at fetch, p50 / p95 — goal p95 ≤ 2 × poll + store delay;
- fetches per batch, p50 / p99 — goal p99 ≤ 2 × B; batches never fetched — goal < 1%
  (batches of honest, live peers, created in the measured window and fresh long enough to be chosen);
- memory: the most peers a node remembered.
Churn: every second a share of the peers (``CHURN_PER_S``) leaves (its record stays up to its TTL, and
fetches of its batches fail) and as many new peers join. Hostile: a share (``HOSTILE_SHARE``) of the peers
announces a batch dated now at every poll and serves garbage (refused, charged): each node mutes them after
three refusals; their fetches are counted apart, and each holds its fetch slot until the node's next poll (the
refusal frees it; the node chooses again at its next poll). ``sybils-K``: K such identities beside the N peers;
``sybils-K-new``: each takes a new identity every ``ROTATE_S`` (a full score again, never muted). The figure that
matters there: honest batches a step trained on.
"""

import argparse
import math
import random
import statistics
import sys
import time
import zlib
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.sampling import Sampler, read_settings
from ftis.node.swarm.exchange.budget import Offer, pick, rank_offers
from ftis.node.swarm.peers.reputation import Reputation, reputation_settings

POLL_S = 1.0  # swarm.poll_interval_s
STEP_S = 10.0  # a node's round: generate, publish, train
STORE_DELAY_S = 0.5  # publish -> the record readable in the DHT
TICK_S = 0.25  # the simulation's clock
TTL_S = 30.0  # swarm.announcement_ttl_s: a departed peer's record stays this long
MAX_AGE_S = 120.0  # swarm.max_age_s
KEEP = 2  # batches a record lists (the node keeps 8; only the newest two are ever the freshest)
WARMUP_S = 20.0
RECORD_BYTES = 3_000  # a full record: 16-batch announcement, public-key subkey, signature
COPIES_PER_KEY = 4  # answers carrying each key's dictionary, beam 2 (0.78 MB for 4 shards × 16 records)
RECORDS_PER_SHARD = 16
CHURN_PER_S = 0.002  # 12% of the swarm replaced per minute
HOSTILE_SHARE = 0.1
ROTATE_S = 2.0  # sybils-K-new: a sybil takes a new identity this often, before any node has judged the old one


@dataclass
class Peer:
    id: str
    shard: int
    hostile: bool
    phase: float  # its polls and steps start at this offset
    joined_at: float
    sampler: Sampler
    reputation: Reputation | None
    rng: random.Random
    listing: tuple = ()  # what its record lists now: ((batch id, created_at), ...), newest first
    pending: list = field(default_factory=list)  # (batch id, peer id) queued for its next step
    refusing: list = field(default_factory=list)  # (batch id, peer id) being refused: a slot until the next poll
    seen: set = field(default_factory=set)  # batch ids considered (fetched or refused)
    left_at: float | None = None  # it left: no more publishing, fetches of its batches fail
    read_records: int = 0  # records read after the warm-up...
    polls: int = 0  # ...in this many polls
    most_remembered: int = 0


@dataclass
class Figures:
    peers: int
    shards: int
    scenario: str
    read_bytes_per_s: float
    full_read_bytes_per_s: float
    steps: int
    steps_with_budget: float  # share
    age_p50: float
    age_p95: float
    fetches_p50: float
    fetches_p99: float
    never_fetched: float  # share of measured batches
    measured_batches: int
    hostile_fetches: float  # share of all fetches that went to hostile peers
    honest_per_step: float  # honest batches a step trained on, on average
    most_remembered: int
    seconds: float  # wall time of the simulation


def sampled_config(peers: int, budget: int) -> SwarmConfig:
    """The settings docs/swarm.md gives for a run of ``peers``: S ≈ N / 16, K = 2, 4 polls remembered."""
    shards = max(1, round(peers / RECORDS_PER_SHARD))
    per_poll = min(2, shards)
    return SwarmConfig(shards=shards, shards_per_poll=per_poll, max_shards_per_poll=min(8, shards), want_peers=32,
                       remember_polls=4, read_beam_size=2, fetch_budget=budget, poll_interval_s=POLL_S,
                       fetch_horizon_s=2 * POLL_S + STORE_DELAY_S, announcement_ttl_s=TTL_S, max_age_s=MAX_AGE_S)


class World:
    def __init__(self, peers: int, budget: int, seconds: float, seed: int, churn: float = 0.0,
                 hostile: float = 0.0, sybils: int = 0, rotate_s: float = 0.0):
        """``sybils``: identities beside the ``peers`` that re-date a batch "now" at every poll and serve garbage;
        ``rotate_s`` > 0: each is replaced by a new identity (a full score again) this often."""
        self.config = sampled_config(peers, budget)
        self.budget, self.seconds, self.churn, self.hostile_share = budget, seconds, churn, hostile
        self.rotate_s, self.scored = rotate_s, bool(hostile or sybils)  # peers keep scores where some are hostile
        self.rng = random.Random(seed)
        self.peers: dict[str, Peer] = {}
        self.shard_members: list[list[str]] = [[] for _ in range(self.config.shards)]
        self.readable: dict[str, tuple] = {}  # peer -> its record as the DHT holds it (after the store delay)
        self.stores: deque[tuple[float, str, tuple]] = deque()  # (readable at, peer, record), in time order
        self.batches: dict[str, tuple[float, str]] = {}  # batch id -> (created_at, peer)
        self.fetches: dict[str, int] = defaultdict(int)
        self.ages: list[float] = []
        self.steps = self.full_steps = self.honest_trained = 0
        self.hostile_fetches = self.all_fetches = 0
        self._serial = 0
        for _ in range(peers):
            self.join(0.0)
        for _ in range(sybils):
            self.join(0.0, hostile=True)

    def join(self, now: float, hostile: bool | None = None) -> None:
        self._serial += 1
        peer_id = f"peer{self._serial}"
        shard = zlib.crc32(peer_id.encode()) % self.config.shards
        rng = random.Random(self.rng.random())
        hostile = self.rng.random() < self.hostile_share if hostile is None else hostile
        reputation = Reputation(reputation_settings(self.config)) if self.scored else None
        # the phase is a whole number of ticks, so each poll and step lands on the clock
        phase = now + self.rng.randrange(int(STEP_S / TICK_S)) * TICK_S
        self.peers[peer_id] = Peer(peer_id, shard, hostile, phase, now, Sampler(read_settings(self.config), rng),
                                   reputation, rng)
        self.shard_members[shard].append(peer_id)

    def leave(self, peer: Peer, now: float) -> None:
        peer.left_at = now  # its record stays readable until TTL_S after its last store

    def publish(self, peer: Peer, now: float) -> None:
        batch_id = f"{peer.id}/{now:.2f}"
        self.batches[batch_id] = (now, peer.id)
        peer.listing = ((batch_id, now), *peer.listing[: KEEP - 1])
        self.stores.append((now + STORE_DELAY_S, peer.id, peer.listing))

    def run(self) -> None:
        ticks = int(self.seconds / TICK_S)
        poll_every, step_every = int(POLL_S / TICK_S), int(STEP_S / TICK_S)
        for tick in range(ticks):
            now = tick * TICK_S
            while self.stores and self.stores[0][0] <= now:
                _, peer_id, record = self.stores.popleft()
                self.readable[peer_id] = record
            if self.churn and tick % poll_every == 0:
                self._churn(now)
            if self.rotate_s and tick % int(self.rotate_s / TICK_S) == 0 and tick:
                for sybil in [p for p in self.peers.values() if p.hostile and p.left_at is None]:
                    self.leave(sybil, now)  # its record stays up to its TTL: its old batches still get refused
                    self.join(now, hostile=True)
            for peer in list(self.peers.values()):
                if peer.left_at is not None:
                    continue
                offset = round((now - peer.phase) / TICK_S)
                if offset < 0:
                    continue
                if offset % step_every == 0:
                    self._step(peer, now)
                if offset % poll_every == 0:
                    self._poll(peer, now)

    def _churn(self, now: float) -> None:
        live = [p for p in self.peers.values() if p.left_at is None]
        for peer in self.rng.sample(live, k=min(len(live), _draw(self.rng, self.churn * len(live) * POLL_S))):
            self.leave(peer, now)
            self.join(now)
        for peer in [p for p in self.peers.values() if p.left_at is not None and now - p.left_at > TTL_S]:
            del self.peers[peer.id]  # its record has expired
            self.readable.pop(peer.id, None)
            self.shard_members[peer.shard].remove(peer.id)

    def _step(self, peer: Peer, now: float) -> None:
        if not peer.hostile:
            if now >= max(WARMUP_S, peer.joined_at + STEP_S):  # after the warm-up, and a joiner's first step
                self.steps += 1
                self.full_steps += len(peer.pending) >= self.budget
                self.honest_trained += len(peer.pending)
            peer.pending = []  # the trainer takes them: room for the next budget
            self.publish(peer, now)

    def _poll(self, peer: Peer, now: float) -> None:
        if peer.hostile:  # a fresh batch dated now at every poll: always among the freshest
            self.publish(peer, now)
            return
        shards = peer.sampler.shards_to_read()
        read = [(other, self.readable[other]) for shard in shards for other in self.shard_members[shard]
                if other in self.readable and other != peer.id]
        if now >= WARMUP_S:
            peer.read_records += len(read)
            peer.polls += 1
        peer.sampler.remember(read)
        peer.most_remembered = max(peer.most_remembered, len(peer.sampler))
        peer.refusing = []  # refused since the last poll: their slots are free
        room = self.budget - len(peer.pending)
        if room <= 0:
            return
        busy = {owner for _, owner in peer.pending}
        offers = [Offer(other, created_at, batch_id) for other, record in peer.sampler.listings().items()
                  if other not in busy for batch_id, created_at in record
                  if batch_id not in peer.seen and now - created_at <= MAX_AGE_S]
        scores = None
        if peer.reputation is not None:
            scores = {other: s.score for other, s in peer.reputation.snapshot(now).items()}
        ranked = rank_offers(offers, now, self.config.poll_interval_s, peer.rng, scores, self.config.fetch_horizon())
        for offer in pick(ranked, room, busy, lambda offer: self._accept(peer, offer, now)):
            if self.peers[offer.peer_id].hostile:
                peer.refusing.append((offer.item, offer.peer_id))
            else:
                peer.pending.append((offer.item, offer.peer_id))

    def _accept(self, peer: Peer, offer: Offer, now: float) -> bool:
        """The fetch: True if it takes a slot (what the node's ``Inbox.consider`` decides: a live peer's batch,
        not muted). A hostile peer's garbage takes its slot until the refusal, before the next poll; a departed
        peer's fetch fails at once."""
        peer.seen.add(offer.item)
        if peer.reputation is not None and peer.reputation.muted(offer.peer_id, now):
            return False
        publisher = self.peers.get(offer.peer_id)
        self.all_fetches += 1
        if publisher is None or publisher.left_at is not None:
            if peer.reputation is not None:
                peer.reputation.failed(offer.peer_id, now)
            return False
        if publisher.hostile:
            self.hostile_fetches += 1
            peer.reputation.refused(offer.peer_id, now)
            return True
        self.fetches[offer.item] += 1
        created_at = self.batches[offer.item][0]
        if now >= WARMUP_S:
            self.ages.append(now - created_at)
        if peer.reputation is not None:
            peer.reputation.delivered(offer.peer_id, now)
        return True

    def figures(self, scenario: str, wall: float) -> Figures:
        honest = [p for p in self.peers.values() if not p.hostile]
        seconds = self.seconds
        rates = [p.read_records * RECORD_BYTES * COPIES_PER_KEY / (p.polls * POLL_S) for p in honest if p.polls]
        read_bytes = statistics.fmean(rates) if rates else 0.0
        n = sum(1 for p in self.peers.values() if p.left_at is None)  # live now
        full = min(n, 20) * RECORD_BYTES * n / POLL_S
        # measured batches: honest, from peers still up a step later, created after the warm-up and a step
        # before the end (so every node had its chance to choose them)
        measured = [batch_id for batch_id, (created_at, owner) in self.batches.items()
                    if WARMUP_S <= created_at <= seconds - 2 * STEP_S and owner in self.peers
                    and not self.peers[owner].hostile and (self.peers[owner].left_at is None
                                                           or self.peers[owner].left_at > created_at + STEP_S)]
        counts = sorted(self.fetches.get(batch_id, 0) for batch_id in measured)
        ages = sorted(self.ages)
        return Figures(
            peers=n, shards=self.config.shards, scenario=scenario, read_bytes_per_s=read_bytes,
            full_read_bytes_per_s=full, steps=self.steps,
            steps_with_budget=self.full_steps / self.steps if self.steps else 0.0,
            age_p50=_quantile(ages, 0.5), age_p95=_quantile(ages, 0.95),
            fetches_p50=_quantile(counts, 0.5), fetches_p99=_quantile(counts, 0.99),
            never_fetched=sum(1 for c in counts if c == 0) / len(counts) if counts else 0.0,
            measured_batches=len(counts),
            hostile_fetches=self.hostile_fetches / self.all_fetches if self.all_fetches else 0.0,
            honest_per_step=self.honest_trained / self.steps if self.steps else 0.0,
            most_remembered=max((p.most_remembered for p in honest), default=0), seconds=wall)


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    return values[min(len(values) - 1, int(q * len(values)))]


def _draw(rng: random.Random, mean: float) -> int:
    """A whole number of events with this mean (the fraction drawn at random)."""
    whole = math.floor(mean)
    return whole + (rng.random() < mean - whole)


def simulate(peers: int, budget: int, seconds: float, seed: int, scenario: str) -> Figures:
    """One run. ``scenario``: honest, churn, hostile, or ``sybils-K`` (K re-dating identities beside the peers)
    and ``sybils-K-new`` (each replaced by a new identity every ``ROTATE_S``)."""
    started = time.perf_counter()
    sybils = int(scenario.split("-")[1]) if scenario.startswith("sybils-") else 0
    world = World(peers, budget, seconds, seed, churn=CHURN_PER_S if scenario == "churn" else 0.0,
                  hostile=HOSTILE_SHARE if scenario == "hostile" else 0.0, sybils=sybils,
                  rotate_s=ROTATE_S if scenario.endswith("-new") else 0.0)
    world.run()
    return world.figures(scenario, time.perf_counter() - started)


def table(rows: list[Figures], budget: int) -> str:
    header = ("| scenario | peers | shards | read KB/s per node | all shards KB/s | steps | with budget | "
              "honest batches a step | age p50 / p95 s | fetches per batch p50 / p99 | never fetched | "
              "hostile fetches | peers remembered | wall s |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for f in rows:
        lines.append(
            f"| {f.scenario} | {f.peers:,} | {f.shards} | {f.read_bytes_per_s / 1e3:,.0f} | "
            f"{f.full_read_bytes_per_s / 1e3:,.0f} | {f.steps:,} | {100 * f.steps_with_budget:.2f}% | "
            f"{f.honest_per_step:.2f} | {f.age_p50:.2f} / {f.age_p95:.2f} | "
            f"{f.fetches_p50:.0f} / {f.fetches_p99:.0f} | "
            f"{100 * f.never_fetched:.2f}% of {f.measured_batches:,} | {100 * f.hostile_fetches:.1f}% | "
            f"{f.most_remembered} | {f.seconds:.1f} |")
    return "\n".join(lines)


def verdicts(rows: list[Figures], budget: int) -> list[str]:
    """The goals, judged on the honest rows (churn and hostile rows are reported beside them)."""
    honest = [f for f in rows if f.scenario == "honest"]
    out = []
    reads = [f.read_bytes_per_s for f in honest]
    if len(reads) > 1 and min(reads) > 0:
        spread = (max(reads) - min(reads)) / min(reads)
        out.append(f"read bytes/s per node across N: spread {100 * spread:.1f}% (goal ≤ 10%: "
                   f"{'met' if spread <= 0.10 else 'MISSED'})")
    bound = 2 * POLL_S + STORE_DELAY_S
    for f in rows:
        goals = [("every step its budget", f.steps_with_budget >= 1.0),
                 (f"age p95 ≤ {bound:g} s", f.age_p95 <= bound),
                 (f"fetches p99 ≤ {2 * budget}", f.fetches_p99 <= 2 * budget),
                 ("< 1% never fetched", f.never_fetched < 0.01)]
        said = ", ".join(f"{name}: {'met' if ok else 'MISSED'}" for name, ok in goals)
        out.append(f"{f.scenario} N={f.peers:,}: {said}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 peers, honest, 45 simulated seconds")
    parser.add_argument("--peers", default=None, help="swarm sizes (default 100,1000,10000; quick 100,1000)")
    parser.add_argument("--budget", type=int, default=8, help="swarm.fetch_budget: batches a step")
    parser.add_argument("--seconds", type=float, default=None, help="simulated seconds (default 120; quick 45)")
    parser.add_argument("--scenarios", default=None, help="honest,churn,hostile (default all; quick honest), "
                                                           "sybils-K, sybils-K-new")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in (args.peers or ("100,1000" if args.quick else "100,1000,10000")).split(",")]
    seconds = args.seconds or (45.0 if args.quick else 120.0)
    scenarios = (args.scenarios or ("honest" if args.quick else "honest,churn,hostile")).split(",")
    print(f"swarm policy simulation: poll {POLL_S:g} s, step {STEP_S:g} s, store delay {STORE_DELAY_S:g} s, "
          f"budget {args.budget} batches a step, {seconds:g} simulated s (warm-up {WARMUP_S:g} s), seed {args.seed}; "
          f"churn {100 * CHURN_PER_S * 60:.0f}% of peers a minute; hostile {100 * HOSTILE_SHARE:.0f}% of peers")
    rows = []
    for scenario in scenarios:
        for n in sizes:
            rows.append(simulate(n, args.budget, seconds, args.seed, scenario))
            print(f"  {scenario} N={n:,}: {rows[-1].seconds:.1f} s", file=sys.stderr, flush=True)
    config = sampled_config(sizes[-1], args.budget)
    print(f"settings at N={sizes[-1]:,}: {config.sampling_line()}")
    print(table(rows, args.budget))
    for line in verdicts(rows, args.budget):
        print(line)


if __name__ == "__main__":
    main()
