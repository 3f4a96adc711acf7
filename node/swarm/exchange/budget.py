"""A fetch budget: which of the announced batches a node fetches now (``rank_offers``, ``pick``), among those its
reads of the directory list. Freshest first (a peer whose score says it sent something bad ranks after all
others); creation times in the same ``tie_s`` slice of age count as equal and are taken better-scored first, then
in random order (so nodes that see the same fresh batches spread their fetches over them); one per peer at a time,
each accepted by the caller's policy (the ``Inbox``), up to the room the budget leaves; none older than a horizon.
docs/swarm.md, "How a node reads a large swarm"."""

import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

Item = TypeVar("Item")


@dataclass(frozen=True)
class Offer(Generic[Item]):
    """A batch a peer announces, as the fetch budget weighs it."""

    peer_id: str
    created_at: float  # the batch's creation time (unix seconds)
    item: Item  # what the caller fetches (an announcement and its descriptor)


# A peer scored below this (``reputation.py``: one refused batch takes a newcomer to 0.5, one failed fetch to
# 0.67; an honest peer with deliveries behind it stays above 0.75 after a failure) ranks after every peer that is
# not, whatever the ages: a peer that dates each batch "now" and serves garbage costs a node one fetch attempt,
# not one at every poll until its mute (three refusals).
SUSPECT_BELOW = 0.75


def rank_offers(offers: Iterable[Offer[Item]], now: float, tie_s: float, rng: random.Random,
                scores: Mapping[str, float] | None = None, horizon_s: float = math.inf) -> list[Offer[Item]]:
    """Peers scored below ``SUSPECT_BELOW`` last; then freshest first: by age in slices of ``tie_s`` (ages in one
    slice are equal), then by the peer's score (``scores``, 1 for a peer without one) in tenths, then at random. A
    batch dated after ``now`` ranks stalest; one older than ``horizon_s`` is left out (a node that reads a sample
    sees fresher ones soon)."""
    scores = scores if scores is not None else {}
    offers = [offer for offer in offers if now - offer.created_at <= horizon_s]

    def key(offer: Offer[Item]) -> tuple[bool, float, float, float]:
        age = now - offer.created_at
        slice_ = math.floor(age / tie_s) if age >= 0 else math.inf
        score = scores.get(offer.peer_id, 1.0)
        return score < SUSPECT_BELOW, slice_, -round(score, 1), rng.random()

    return sorted(offers, key=key)


def pick(ranked: Iterable[Offer[Item]], room: int, busy_peers: Iterable[str],
         accept: Callable[[Offer[Item]], bool]) -> list[Offer[Item]]:
    """Up to ``room`` offers in ranked order, one per peer, none from ``busy_peers`` (one of whose batches is
    already fetched or queued), each one ``accept`` takes (it may refuse: stale, seen, muted...)."""
    chosen: list[Offer[Item]] = []
    busy = set(busy_peers)
    for offer in ranked:
        if len(chosen) >= room:
            break
        if offer.peer_id not in busy and accept(offer):
            chosen.append(offer)
            busy.add(offer.peer_id)
    return chosen
