"""``[swarm]``: joining the swarm and exchanging batches with it (docs/swarm.md)."""

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ftis.node.config.base import MAX_BYTES, MAX_CONCURRENT_STREAMS, MAX_COUNT, MAX_SECONDS, Section
from ftis.protocol.limits import MAX_ANNOUNCEMENT_TTL_S

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_SHARDS = 1024  # 16,384 peers at 16 records a shard; the schema validator's build time grows with it


class SwarmConfig(Section):
    """Joining the swarm and exchanging batches with it (docs/swarm.md)."""

    run_id: str = Field("ftis-demo", pattern=RUN_ID_PATTERN, description="Peers exchange batches only within a run.")
    initial_peers: list[str] = Field(
        default_factory=list, description="Full multiaddrs of any members (the bootstrap's, printed at its start)."
    )
    host_maddrs: list[str] = Field(
        default_factory=lambda: ["/ip4/0.0.0.0/tcp/0"],
        description="Where to listen. The default takes any free port on every interface; a public node "
        "behind a firewall sets a fixed port, e.g. /ip4/0.0.0.0/tcp/31337.",
    )
    announce_maddrs: list[str] = Field(
        default_factory=list, description="Public addresses to advertise when they differ from the listening ones."
    )
    identity_path: Path | None = Field(
        None, description="Private key file: keeps the peer id and the announcement key across restarts."
    )
    other_tokenizers: Literal["sequence", "skip"] = Field(
        "sequence", description="Peers whose tokenizer differs from this node's: sequence: fetch their batches and "
        "train on their completion texts, tokenized here, with one importance weight per completion (docs/loss.md); "
        "skip: never fetch them.",
    )
    send_texts: bool = Field(True, description="Send each completion's text in its batch (protocol v3: ~1 byte a "
                             "token, +40%), which peers with another tokenizer train on; a run where every node shares "
                             "one tokenizer can save the bytes.")
    client_mode: bool = Field(False, description="Reach out only: fetch, but peers cannot fetch from us (a node behind "
                              "a NAT serves through a relay instead: reachability).")
    reachability: Literal["auto", "public", "relayed"] = Field(
        "auto", description="How peers reach this node (docs/nat.md). public: dialled directly (a public address or "
        "a forwarded port); relayed: behind a NAT, through a slot it reserves on one of `relays`; auto: AutoNAT "
        "finds out which, from the initial peers' attempts to dial back.",
    )
    relays: list[str] = Field(
        default_factory=list, description="Full multiaddrs of relays a node behind a NAT reserves a slot on; empty: "
        "its initial peers (a bootstrap offers a relay unless started with --no-relay). A relay's address must be "
        "public: libp2p advertises no circuit through a private one.",
    )
    relay_service: bool = Field(False, description="Offer a relay to members behind a NAT (the bootstrap does by "
                                "default); bounded by the relay_* settings below. Only while reachable publicly.")
    relay_max_reservations: int = Field(
        128, ge=1, le=4096, description="Relay slots held at once, in all and by one IP address (p2pd bounds both "
        "with this one number); a slot lasts an hour and is renewed while its holder stays connected.",
    )
    relay_max_circuits: int = Field(8, ge=1, le=1024, description="Relayed connections open at once per peer.")
    relay_data_limit_bytes: int = Field(1 << 30, ge=1 << 16, le=MAX_BYTES,
                                        description="Bytes one relayed connection may carry "
                                        "each way before it is reset (a fetch then goes on over a new one).")
    relay_time_limit_s: float = Field(1800.0, ge=10, le=MAX_SECONDS,
                                      description="The longest one relayed connection may stay open.")

    @field_validator("initial_peers", "host_maddrs", "announce_maddrs", "relays")
    @classmethod
    def _multiaddrs(cls, values: list[str], info: ValidationInfo) -> list[str]:
        """Parsed here, so that a typo is refused before a daemon starts or a model loads."""
        from hivemind.utils.multiaddr import Multiaddr  # hivemind's own parser, imported only for given values

        for value in values:
            try:
                address = Multiaddr(value)
            except Exception as error:  # the parser raises several types, all meaning "not a multiaddr"
                raise ValueError(f"{value!r} is not a multiaddr ({error})") from None
            if info.field_name in ("initial_peers", "relays") and "p2p" not in {p.name for p in address.protocols()}:
                raise ValueError(f"{value!r} names no peer: a peer's full address ends in /p2p/<peer id> "
                                 "(the bootstrap prints it)")
        return values
    shards: int = Field(
        4, ge=1, le=MAX_SHARDS, description="S: DHT keys the run's announcements spread over, a run constant every "
        "peer must share: about the largest swarm the run expects / 16 (docs/swarm.md). One DHT answer carries at "
        "most 4 MiB (~1,400 full records). Every node builds a validator with one field per shard (~0.4 s at 1,024).",
    )
    shards_per_poll: int = Field(
        0, ge=0, le=MAX_SHARDS,
        description="K: shards a poll reads, the next K of this node's own random order of all S (so it "
        "covers them all every S/K polls); 0: all of them every poll (a small swarm). A sampled read costs about "
        "K × 16 records × 3 KB × the DHT peers that answer, whatever the swarm's size.",
    )
    max_shards_per_poll: int = Field(
        0, ge=0, le=MAX_SHARDS,
        description="While the node remembers fewer than want_peers peers (a run smaller than planned), "
        "each poll reads twice as many shards as the last, up to this; 0: shards_per_poll (never more).",
    )
    want_peers: int = Field(16, ge=0, le=MAX_COUNT,
                            description="Peers a node wants to remember (remember_polls); fewer, and it "
                            "reads more shards (max_shards_per_poll); 0: it never does.")
    remember_polls: int = Field(1, ge=1, le=64, description="A node remembers what its last this many polls read "
                                "(the newest announcement of each peer) and fetches from that: bounded memory.")
    read_beam_size: int = Field(0, ge=0, le=64, description="DHT peers a read keeps asking near each key; with the "
                                "latest values asked for, each that holds a copy answers with it. 0: hivemind's "
                                "(20). 2 finds a key's replicas on a settled DHT at a fraction of the bytes.")
    fetch_budget: int = Field(
        0, ge=0, le=MAX_COUNT,
        description="Batches fetched or waiting for the trainer at once, from distinct peers, freshest first "
        "(random tie-breaks among those of one poll interval's age): just enough to fill mix.max_peer_groups, e.g. "
        "⌈max_peer_groups / groups per batch⌉ + 1. 0: every fresh batch announced (a small swarm). Rounds mode "
        "then waits for this many of the round's batches, not for every live peer.",
    )
    fetch_horizon_s: float = Field(
        0.0, ge=0, le=MAX_SECONDS,
        description="Under a fetch budget, batches older than this are not taken (the budget waits for "
        "fresher ones); 0: max_age_s. A large swarm: 2 × poll_interval_s + a DHT store's delay (~0.5 s).",
    )

    def fetch_horizon(self) -> float:
        """The oldest a batch may be to be taken under the fetch budget, in seconds."""
        return self.fetch_horizon_s or self.max_age_s
    announce_interval_s: float = Field(5.0, gt=0, le=MAX_SECONDS,
                                       description="Re-announce period (also at once after a publish).")
    announcement_ttl_s: float = Field(30.0, gt=0, le=MAX_ANNOUNCEMENT_TTL_S,
                                      description="An announcement expires unless renewed in time (at most 300 s).")
    poll_interval_s: float = Field(1.0, gt=0, le=MAX_SECONDS, description="How often peers' announcements are read.")
    max_age_s: float = Field(120.0, gt=0, le=MAX_SECONDS, description="Batches created longer ago are not fetched.")
    fetch_timeout_s: float = Field(10.0, gt=0, le=MAX_SECONDS,
                                   description="The longest one payload fetch may take, connect to last "
                                   "byte; a smaller payload gets less (fetch_base_s, fetch_min_bytes_per_s).")
    fetch_base_s: float = Field(3.0, gt=0, le=MAX_SECONDS,
                                description="A fetch's deadline is this plus the payload's size at "
                                "fetch_min_bytes_per_s, at most fetch_timeout_s: a slow peer cannot hold a fetch "
                                "slot for the whole timeout with a small batch.")
    fetch_min_bytes_per_s: float = Field(1024 * 1024, gt=0, le=MAX_BYTES,
                                         description="The slowest transfer a fetch deadline allows.")
    fetch_retries: int = Field(
        2, ge=0, le=8, description="Further attempts after a fetch fails in transit (refused connection, stream "
        "closed early, deadline passed), each while the peer still announces the batch and it is within max_age_s; "
        "0: none."
    )
    fetch_retry_backoff_s: float = Field(1.0, gt=0, le=MAX_SECONDS,
                                         description="Wait before the first retry; doubles for each next.")
    max_concurrent_fetches: int = Field(8, ge=2, le=MAX_CONCURRENT_STREAMS,
                                        description="Payload fetches in flight at once, at most 2 from one "
                                        "peer; a freed slot goes to the waiting peer that holds the fewest.")
    max_concurrent_serves: int = Field(16, ge=2, le=MAX_CONCURRENT_STREAMS,
                                       description="Fetches of this node's payloads served at once, at most "
                                       "2 to one peer; more are turned away (the fetcher tries again later).")
    per_peer_quota: int = Field(4, ge=1, le=MAX_COUNT,
                                description="Batches of one peer fetched but not yet trained on.")
    max_buffered_batches: int = Field(64, ge=1, le=MAX_COUNT,
                                      description="Batches fetched but not yet trained on, all peers.")
    max_buffered_bytes: int = Field(256 * 1024 * 1024, ge=1, le=MAX_BYTES, description=(
        "The memory they take, in bytes: a batch being fetched counts its announced size, a fetched one its payload "
        "and what decoding it takes (ids, log-probs, texts), known before any of it is inflated."))
    keep_batches: int = Field(8, ge=1, le=16, description="Own recent batches served and announced.")
    start_timeout_s: float = Field(60.0, gt=0, le=MAX_SECONDS,
                                   description="Joining the DHT (an identity plus peers doubles it).")
    score_half_life_s: float = Field(
        1800.0, gt=0, le=MAX_SECONDS,
        description="Peer scores (``swarm/peers/reputation.py``): evidence about a peer (batches delivered, "
        "refused, failed, divergence-filtered) loses half its weight in this time. Long, so that a burst of failed "
        "fetches on a flaky link is weighed against the peer's whole recent record."
    )
    score_min_evidence: float = Field(
        3.0, ge=0, le=MAX_COUNT,
        description="A peer is judged (can be muted) only with at least this much evidence, in batches "
        "(a failed fetch counts half), and after a mute only once this much new evidence came in."
    )
    mute_below: float = Field(
        0.3, ge=0, le=1, description="A judged peer whose score (good / all evidence, from 0 to 1) falls below this "
        "is muted: its batches are refused unfetched. 0.3 mutes a peer when most of its completions are "
        "divergence-filtered, over ~82% of its fetches fail after retries, over 70% of its batches are refused, or "
        "(rounds mode) it misses over ~48% of the rounds it is waited for; an honest peer on a flaky link (half of all "
        "attempts lost: ~12% of batches) scores ~0.93. 0 never mutes."
    )
    mute_s: float = Field(300.0, gt=0, le=MAX_SECONDS,
                          description="A peer's first mute; each next mute of it lasts twice as long.")
    mute_max_s: float = Field(3600.0, gt=0, le=MAX_SECONDS, description="The longest mute.")

    @model_validator(mode="after")
    def _ttl_outlives_interval(self) -> "SwarmConfig":
        if self.announcement_ttl_s <= self.announce_interval_s:
            raise ValueError("announcement_ttl_s must exceed announce_interval_s, or announcements lapse")
        if self.shards_per_poll > self.shards:
            raise ValueError(f"shards_per_poll ({self.shards_per_poll}) exceeds shards ({self.shards})")
        if self.max_shards_per_poll and not self.shards_per_poll <= self.max_shards_per_poll <= self.shards:
            raise ValueError(f"max_shards_per_poll ({self.max_shards_per_poll}) must lie between shards_per_poll and "
                             f"shards ({self.shards_per_poll or self.shards}, {self.shards})")
        if self.fetch_budget > self.max_buffered_batches:
            raise ValueError(f"fetch_budget ({self.fetch_budget}) exceeds max_buffered_batches "
                             f"({self.max_buffered_batches})")
        return self

    def sampling_line(self) -> str:
        """The directory settings in one line (``ftis-node status``, a node's start-up)."""
        read = "all" if not self.shards_per_poll or self.shards_per_poll == self.shards else str(self.shards_per_poll)
        more = f" (up to {self.max_shards_per_poll} while under {self.want_peers} peers)" if (
            self.max_shards_per_poll > (self.shards_per_poll or self.shards)) else ""
        budget = ("every fresh batch" if self.fetch_budget == 0 else
                  f"{self.fetch_budget} batches at once, none older than {self.fetch_horizon():g} s")
        beam = "hivemind's" if self.read_beam_size == 0 else str(self.read_beam_size)
        return (f"directory: {self.shards} shards, {read} read per poll{more}, the last {self.remember_polls} "
                f"poll{'s' if self.remember_polls != 1 else ''} remembered, read beam {beam}; fetch budget {budget}")
