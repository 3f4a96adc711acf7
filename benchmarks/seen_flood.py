"""Sybils flooding a node's seen set: what one inbox holds and how long its polls block, on a simulated clock.

Run (from the repo root):  python -m benchmarks.seen_flood [--sybils 500] [--batches 16] [--seconds 60]

One ``Inbox`` with the limits ``ftis-node join`` sets (``inbox_limits`` of the default ``[swarm]``: max_age_s 120,
fetch budget 0, so every listed batch is considered), and a clock this script moves one poll (1 s) at a time. At
every poll each of ``--sybils`` identities lists ``--batches`` new batches dated now (new rounds: a re-dated listing
is a new batch to the node), and the node considers every listed batch, as a transport's poll does
(``Inbox.choose``); a fetch it starts fails at once (a Sybil serves nothing), as the transport would report it.

Printed every 10 simulated seconds and at the end: the seen entries the inbox holds (and the deferred ones among
them), the process's RSS growth since the start (MB), and the longest one poll's ``consider`` calls took (s): that
time blocks the transport's network loop.
"""

import argparse
import gc
import hashlib
import random
import time

import psutil

from ftis.node.config import SwarmConfig
from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import inbox_limits
from ftis.node.swarm.exchange.reasons import FETCH_FAILED
from ftis.protocol.announcement import Announcement, BatchDescriptor

T0 = 1_700_000_000.0
RUN = "flood-run"
TOKENIZER = "sha256:flood"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def listing(peer: int, poll: int, batches: int, now: float) -> Announcement:
    """The Sybil's announcement at this poll: ``batches`` batches of new rounds, all dated now."""
    descriptors = tuple(BatchDescriptor(round=poll * batches + k, groups=1, tokens=64, bytes=4096,
                                        sha256=hashlib.sha256(b"%d/%d/%d" % (peer, poll, k)).digest(),
                                        policy_version=0, created_at=now) for k in range(batches))
    return Announcement(run_id=RUN, peer_id=f"sybil-{peer:05d}", model="m", adapter="full", tokenizer=TOKENIZER,
                        policy_version=0, published_batches=poll * batches, published_tokens=0, updated_at=now,
                        batches=descriptors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sybils", type=int, default=500)
    parser.add_argument("--batches", type=int, default=16, help="new batches each lists per poll")
    parser.add_argument("--seconds", type=int, default=60, help="simulated seconds, one poll each")
    args = parser.parse_args()
    clock = Clock()
    inbox = Inbox(RUN, TOKENIZER, inbox_limits(SwarmConfig()), clock)
    rng = random.Random(0)
    process = psutil.Process()
    gc.collect()
    start = process.memory_info().rss
    worst = 0.0
    print(f"{'t (s)':>6} {'seen':>9} {'deferred':>9} {'RSS +MB':>8} {'worst poll s':>13}", flush=True)
    for poll in range(args.seconds):
        clock.now = T0 + poll
        announcements = [listing(peer, poll, args.batches, clock.now) for peer in range(args.sybils)]
        started = time.perf_counter()
        chosen = inbox.choose(announcements, 0, 1.0, rng)
        worst = max(worst, time.perf_counter() - started)
        for announcement, descriptor in chosen:
            inbox.fail(announcement.peer_id, descriptor, FETCH_FAILED)
        if (poll + 1) % 10 == 0 or poll + 1 == args.seconds:
            growth = (process.memory_info().rss - start) / 1e6
            deferred = getattr(inbox._seen, "deferred", None) or getattr(inbox, "_deferred", ())  # either version
            print(f"{poll + 1:>6} {len(inbox._seen):>9} {len(deferred):>9} {growth:>8.1f} "
                  f"{worst:>13.3f}", flush=True)
    reasons = sorted({reason for _, reason in inbox.stats().rejections})
    print("rejections by reason:", {reason: inbox.stats().rejected(reason) for reason in reasons})


if __name__ == "__main__":
    main()
