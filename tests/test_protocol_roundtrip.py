"""Protocol v1 round trips: what ``encode`` writes, ``decode`` gives back.

Run: python -m pytest tests/test_protocol_roundtrip.py -q

Everything is exact except the sampler log-probs, which travel quantised to a step of 2^-9 and so come
back within 2^-10 < 1e-3 (docs/protocol.md: the precision the IS weight needs). Token ids and log-probs are
drawn from a seeded NumPy generator rather than element by element, so that Hypothesis spends its
budget on batch shapes and metadata and an example stays fast.
"""

import math
from dataclasses import replace

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    decode,
    encode,
)
from ftis.protocol.limits import (
    FINISH_REASONS,
    LOGPROB_STEP,
    MAX_COMPLETION_TOKENS,
    MAX_NAME_CHARS,
    MAX_ROUND,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_LOGPROB,
    MIN_TEMPERATURE,
)

MAX_ERROR = LOGPROB_STEP / 2  # 2^-10 ≈ 9.8e-4
# Vocabulary sizes on both sides of each id-width boundary (1, 2 and 3 bytes), plus real ones.
VOCAB_SIZES = [200, 256, 257, 50_000, 65_536, 65_537, 151_936, MAX_VOCAB_SIZE]


# --- building batches -------------------------------------------------------------------------------


def random_logprobs(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) float64 log-probs in [-40, 0] with the values that stress quantisation mixed in: exact 0,
    tiny negatives that round to 0, and half-steps that round either way."""
    special = np.array([0.0, -0.0, -1e-12, -1e-7, -LOGPROB_STEP / 2, -LOGPROB_STEP * 1.5, -40.0])
    values = -rng.exponential(2.0, n).clip(0, 40)  # mostly near 0, as a sampler's are
    pick = rng.random(n) < 0.3
    values[pick] = rng.choice(special, int(pick.sum()))
    return values


def make_completion(rng: np.random.Generator, length: int, vocab_size: int, reward: float) -> Completion:
    ids = rng.integers(0, vocab_size, length)
    ids[rng.random(length) < 0.1] = vocab_size - 1  # the largest id must fit its width
    return Completion(
        token_ids=ids,
        sampler_logprobs=random_logprobs(rng, length),
        reward=reward,
        finish_reason=FINISH_REASONS[int(rng.integers(len(FINISH_REASONS)))],
    )


def simple_batch(logprobs=(-0.5, 0.0), vocab_size: int = 200) -> RolloutBatch:
    """One group of one completion whose log-probs are ``logprobs``."""
    n = len(logprobs)
    completion = Completion(np.arange(n) % vocab_size, np.asarray(logprobs, np.float64), 1.0, "stop")
    group = Group("g0", TaskRef("arith", "train", 0, "4"), np.array([1, 2, 3]), (completion,))
    return RolloutBatch(
        run_id="run",
        peer_id="peer",
        round=0,
        created_at=1_700_000_000.0,
        policy=PolicyInfo("tiny", "", "full", 0),
        tokenizer=TokenizerInfo("fp", vocab_size),
        sampling=SamplingSettings(1.0, 1.0, 0, max(64, n)),
        groups=(group,),
    )


names = st.text(min_size=1, max_size=24)


@st.composite
def batches(draw) -> RolloutBatch:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vocab_size = draw(st.sampled_from(VOCAB_SIZES))
    num_groups = draw(st.integers(1, 4))
    group_ids = draw(st.lists(names, min_size=num_groups, max_size=num_groups, unique=True))
    groups, longest = [], 1
    for group_id in group_ids:
        size = draw(st.integers(1, 8))
        lengths = draw(st.lists(st.integers(1, 50), min_size=size, max_size=size))
        rewards = draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=size, max_size=size))
        longest = max(longest, *lengths)
        task = TaskRef(
            dataset=draw(names),
            split=draw(st.sampled_from(["", "train", "test"])),
            index=draw(st.integers(0, 2**63 - 1)),
            answer=draw(st.text(max_size=40)),
        )
        prompt_ids = rng.integers(0, vocab_size, draw(st.integers(1, 30)))
        completions = tuple(
            make_completion(rng, length, vocab_size, reward) for length, reward in zip(lengths, rewards, strict=True)
        )
        groups.append(Group(group_id, task, prompt_ids, completions))
    return RolloutBatch(
        run_id=draw(st.text(min_size=1, max_size=MAX_NAME_CHARS)),
        peer_id=draw(names),
        round=draw(st.integers(0, MAX_ROUND)),
        created_at=draw(st.floats(0, 1e11)),
        policy=PolicyInfo(
            model=draw(names),
            revision=draw(st.sampled_from(["", "main", "0123abcd"])),
            adapter=draw(st.sampled_from(["full", "lora"])),
            policy_version=draw(st.integers(0, 2**63 - 1)),
        ),
        tokenizer=TokenizerInfo(draw(names), vocab_size),
        sampling=SamplingSettings(
            temperature=draw(st.floats(MIN_TEMPERATURE, MAX_TEMPERATURE)),
            top_p=draw(st.floats(1e-9, 1.0)),
            top_k=draw(st.integers(0, vocab_size)),
            max_new_tokens=draw(st.integers(longest, MAX_COMPLETION_TOKENS)),
        ),
        groups=tuple(groups),
    )


# --- checking a round trip --------------------------------------------------------------------------


def assert_array_out(array: np.ndarray, dtype: type) -> None:
    assert array.dtype == dtype
    assert array.ndim == 1
    assert not array.flags.writeable
    with pytest.raises(ValueError):
        array[:1] = 0


def assert_round_trip(batch: RolloutBatch, decoded: RolloutBatch) -> None:
    """``decoded`` is ``batch``: metadata and ids exact, log-probs within MAX_ERROR, order kept."""
    for name in ("run_id", "peer_id", "round", "created_at", "policy", "tokenizer", "sampling"):
        assert getattr(decoded, name) == getattr(batch, name), name
    assert [g.group_id for g in decoded.groups] == [g.group_id for g in batch.groups]
    for group, got in zip(batch.groups, decoded.groups, strict=True):
        assert got.task == group.task
        assert_array_out(got.prompt_ids, np.int64)
        np.testing.assert_array_equal(got.prompt_ids, group.prompt_ids)
        assert len(got.completions) == len(group.completions)
        for completion, out in zip(group.completions, got.completions, strict=True):
            assert_array_out(out.token_ids, np.int64)
            assert_array_out(out.sampler_logprobs, np.float32)
            np.testing.assert_array_equal(out.token_ids, completion.token_ids)
            error = np.abs(out.sampler_logprobs.astype(np.float64) - completion.sampler_logprobs)
            assert error.max() <= MAX_ERROR
            assert np.all(out.sampler_logprobs <= 0)
            assert out.reward == completion.reward
            assert out.finish_reason == completion.finish_reason


# --- tests ------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip(batch: RolloutBatch):
    data = encode(batch)
    decoded = decode(data)
    assert_round_trip(batch, decoded)
    # Quantisation is idempotent: the decoded batch re-encodes to the same bytes and decodes to itself.
    assert encode(decoded) == data
    assert decode(data) == decoded


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda t: t.__name__)
def test_decode_accepts_bytes_like(wrap):
    batch = simple_batch()
    data = encode(batch)
    decoded = decode(wrap(data))
    assert_round_trip(batch, decoded)
    assert decoded == decode(data)


def test_decoded_arrays_do_not_alias_the_input():
    data = bytearray(encode(simple_batch()))
    decoded = decode(data)
    before = decoded.groups[0].completions[0].token_ids.copy()
    data[:] = bytes(len(data))
    np.testing.assert_array_equal(decoded.groups[0].completions[0].token_ids, before)


@pytest.mark.parametrize("logprob", [-30_000.0, -30_000.123456, -12_345.6789, MIN_LOGPROB, -40.0])
def test_very_negative_logprob_round_trips(logprob):
    batch = simple_batch((logprob, 0.0, -1e-3))
    decoded = decode(encode(batch))
    assert_round_trip(batch, decoded)
    assert abs(float(decoded.groups[0].completions[0].sampler_logprobs[0]) - logprob) <= 1e-3


def test_zero_and_tiny_negative_logprobs_decode_to_zero():
    decoded = decode(encode(simple_batch((0.0, -0.0, -1e-30, -LOGPROB_STEP / 4))))
    assert decoded.groups[0].completions[0].sampler_logprobs.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_logprobs_on_the_grid_are_exact():
    grid = -np.arange(0, 4096, 37) * LOGPROB_STEP
    decoded = decode(encode(simple_batch(tuple(grid))))
    np.testing.assert_array_equal(decoded.groups[0].completions[0].sampler_logprobs, grid)


@pytest.mark.parametrize(
    ("vocab_size", "width"), [(1, 1), (200, 1), (256, 1), (257, 2), (65_536, 2), (65_537, 3), (MAX_VOCAB_SIZE, 3)]
)
def test_id_width_follows_the_vocabulary(vocab_size, width):
    batch = simple_batch((-1.0,) * 3, vocab_size=vocab_size)
    ids = np.array([0, vocab_size - 1, vocab_size // 2])
    completion = Completion(ids, batch.groups[0].completions[0].sampler_logprobs, 0.0, "length")
    group = Group("g", batch.groups[0].task, ids, (completion,))
    batch = replace(batch, groups=(group,))
    data = encode(batch)
    assert msgpack.unpackb(data)["body"]["tokens"]["id_width"] == width
    assert_round_trip(batch, decode(data))


@pytest.mark.parametrize(("lowest", "width"), [(0.0, 1), (-255 * LOGPROB_STEP, 1), (-0.5, 2), (-200.0, 3)])
def test_logprob_width_is_the_smallest_that_fits(lowest, width):
    data = encode(simple_batch((lowest, 0.0)))
    assert msgpack.unpackb(data)["body"]["tokens"]["logprob_width"] == width


def test_group_and_completion_order_is_kept():
    rng = np.random.default_rng(0)
    base = simple_batch()
    groups = tuple(
        Group(f"group-{k}", TaskRef("arith", "test", 10 - k, str(k)), np.array([k + 1]),
              tuple(make_completion(rng, c + 1, 200, float(10 * k + c)) for c in range(5)))
        for k in reversed(range(6))
    )  # fmt: skip
    decoded = decode(encode(replace(base, groups=groups)))
    assert [g.group_id for g in decoded.groups] == [f"group-{k}" for k in reversed(range(6))]
    for k, group in zip(reversed(range(6)), decoded.groups, strict=True):
        assert [c.reward for c in group.completions] == [float(10 * k + c) for c in range(5)]
        assert [c.num_tokens for c in group.completions] == [1, 2, 3, 4, 5]


def test_wire_size_beats_eight_bytes_per_token():
    """docs/protocol.md: the paper's uint32 id + float32 log-prob is 8 bytes/token; v1 must do better even on
    incompressible ids (uniform over a 151,936-token vocabulary) and log-probs spread over [-40, 0]."""
    rng = np.random.default_rng(1)
    groups = tuple(
        Group(f"g{k}", TaskRef("gsm8k", "train", k, "42"), rng.integers(0, 151_936, 100),
              tuple(make_completion(rng, 200, 151_936, 1.0) for _ in range(8)))
        for k in range(4)
    )  # fmt: skip
    batch = replace(simple_batch(vocab_size=151_936), groups=groups)
    batch = replace(batch, sampling=SamplingSettings(1.0, 1.0, 0, 256))
    data = encode(batch)
    tokens = batch.num_prompt_tokens + batch.num_completion_tokens
    assert len(data) / tokens < 4.5  # 3.94 when written: ~2.2 bytes of id entropy, ~1.7 of log-prob
    assert_round_trip(batch, decode(data))


def test_rewards_are_exact_float64():
    for reward in (0.1, -0.0, 1e-300, -1.7976931348623157e308, math.pi):
        batch = simple_batch()
        c = batch.groups[0].completions[0]
        group = Group("g0", batch.groups[0].task, batch.groups[0].prompt_ids,
                      (Completion(c.token_ids, c.sampler_logprobs, reward, "length"),))  # fmt: skip
        decoded = decode(encode(replace(batch, groups=(group,))))
        assert decoded.groups[0].completions[0].reward == reward
        assert type(decoded.groups[0].completions[0].reward) is float
