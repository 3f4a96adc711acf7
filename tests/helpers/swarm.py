"""Shared helpers of the swarm tests: tiny rollout batches, what a peer would announce for them, a
fake clock, and a real clock that a test can move on.

The batches are small (a few groups, a vocabulary of 64) and survive the wire exactly: their
log-probs are multiples of ``LOGPROB_STEP``, the step the protocol quantises to, so a received batch
compares ``==`` with the published one.
"""

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ftis.node.swarm.exchange.outbox import describe
from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    encode,
)
from ftis.protocol.announcement import Announcement, BatchDescriptor
from ftis.protocol.limits import FINISH_REASONS, LOGPROB_STEP

RUN_ID = "run-a"
TOKENIZER = "tok-a"  # the fingerprint every peer shares unless a test says otherwise
VOCAB_SIZE = 64
MAX_NEW_TOKENS = 16
T0 = 1_700_000_000.0  # the fake clock's start, unix seconds


class FakeClock:
    """A clock that moves only when told to: ``clock()`` is now, ``clock.advance(s)`` moves it on."""

    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ShiftedClock:
    """A real clock a test can move on: ``clock()`` is ``base() + shift``, ``clock.advance(s)`` adds to
    the shift. A network transport ages batches by it, so a test makes them old without sleeping."""

    def __init__(self, base: Callable[[], float]):
        self.base, self.shift = base, 0.0

    def __call__(self) -> float:
        return self.base() + self.shift

    def advance(self, seconds: float) -> None:
        self.shift += seconds


def make_batch(
    peer_id: str,
    round_: int,
    created_at: float = T0,
    *,
    run_id: str = RUN_ID,
    tokenizer: str = TOKENIZER,
    model: str = "tiny-model",
    adapter: str = "full",
    policy_version: int = 0,
    groups: int = 2,
    group_size: int = 3,
) -> RolloutBatch:
    """A valid batch whose contents depend only on (peer_id, round): token ids below ``VOCAB_SIZE``,
    log-probs ≤ 0 on the wire's grid, completions of 1 to 8 tokens."""
    rng = np.random.default_rng(zlib.crc32(f"{peer_id}/{round_}".encode()))  # str hash() is salted per process
    built = []
    for g in range(groups):
        completions = []
        for c in range(group_size):
            n = int(rng.integers(1, 9))
            completions.append(Completion(
                token_ids=rng.integers(0, VOCAB_SIZE, n),
                sampler_logprobs=-rng.integers(0, 4096, n) * LOGPROB_STEP,  # (n,) exact on the wire
                reward=float(c % 2),
                finish_reason=FINISH_REASONS[c % len(FINISH_REASONS)],
            ))
        prompt_ids = rng.integers(0, VOCAB_SIZE, int(rng.integers(1, 6)))
        built.append(Group(f"{peer_id}/{round_}/{g}", TaskRef("arith", "train", 10 * round_ + g, str(g)), prompt_ids,
                           tuple(completions)))
    return RolloutBatch(
        run_id=run_id,
        peer_id=peer_id,
        round=round_,
        created_at=created_at,
        policy=PolicyInfo(model, "", adapter, policy_version),
        tokenizer=TokenizerInfo(tokenizer, VOCAB_SIZE),
        sampling=SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=MAX_NEW_TOKENS),
        groups=tuple(built),
    )


@dataclass(frozen=True)
class Published:
    """A batch as its publisher would offer it: the announcement listing it, its descriptor, its bytes."""

    announcement: Announcement
    descriptor: BatchDescriptor
    data: bytes
    batch: RolloutBatch


def publish(batch: RolloutBatch, *, announced_by: str | None = None, now: float = T0) -> Published:
    """What ``announced_by`` (the batch's own peer by default) would announce for ``batch`` alone."""
    data = encode(batch)
    descriptor = describe(batch, data)
    announcement = Announcement(
        run_id=batch.run_id,
        peer_id=announced_by or batch.peer_id,
        model=batch.policy.model,
        adapter=batch.policy.adapter,
        tokenizer=batch.tokenizer.fingerprint,
        policy_version=batch.policy.policy_version,
        published_batches=1,
        published_tokens=descriptor.tokens,
        updated_at=now,
        batches=(descriptor,),
    )
    return Published(announcement, descriptor, data, batch)
