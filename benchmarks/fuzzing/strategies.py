"""Hypothesis strategies for the protocol: structurally valid batches and announcements drawn anywhere
within the limits, and near-valid messages (a valid one with one value replaced by a drawn one).

Used by ``tests/test_fuzz.py`` and ``benchmarks/fuzz.py``. Valid draws must encode, decode to themselves
and pass the oracle (``oracle.check_batch``); near-valid ones must be refused with ``DecodeError``
or pass it.
"""

import hashlib
import random

import msgpack
import numpy as np
from hypothesis import strategies as st

from benchmarks.fuzzing.inputs import (
    BOUNDARY_FLOATS,
    BOUNDARY_INTS,
    INTERESTING_VALUES,
    all_nodes,
    pack,
    reframe,
    unpack,
)
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo
from ftis.protocol.announcement import Announcement, BatchDescriptor, Reach
from ftis.protocol.limits import (
    ADAPTERS,
    FINISH_REASONS,
    LOGPROB_STEP,
    MAX_ANNOUNCED_BATCHES,
    MAX_ANSWER_CHARS,
    MAX_BATCH_TOKENS,
    MAX_GROUPS,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_RELAY_ADDRS,
    MAX_ROUND,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_TEMPERATURE,
)

INT64_MAX = (1 << 63) - 1
MAX_Q = (1 << 24) - 1  # the largest quantised log-prob: 3 bytes


def strings(max_chars: int, *, min_size: int = 1) -> st.SearchStrategy[str]:
    """Short drawn text, or text at the limit (drawn at full length, it would make most of the run's time)."""
    return st.one_of(st.text(min_size=min_size, max_size=12), st.sampled_from(["x" * max_chars, "🙂" * max_chars]))


names = strings(MAX_NAME_CHARS)
int64s = st.integers(0, INT64_MAX)
rounds = st.integers(0, MAX_ROUND)  # a batch's round
times = st.floats(0.0, 1e11, allow_nan=False)
vocab_sizes = st.one_of(st.sampled_from([1, 2, 255, 256, 257, 65_535, 65_536, 65_537, 151_936, MAX_VOCAB_SIZE]),
                        st.integers(1, MAX_VOCAB_SIZE))


# A completion's text: any text UTF-8 can carry (every character but the lone surrogates), short; 0 to 4
# characters a token keeps it far within the bound (MAX_TEXT_BYTES_PER_TOKEN bytes a token).
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=4)


@st.composite
def batches(draw: st.DrawFn, max_groups: int = 4, max_group_size: int = 4, max_tokens: int = 12) -> RolloutBatch:
    """A batch within every limit: ids below the vocabulary, log-probs on the wire's grid (so it
    round-trips exactly), any finite reward, names up to their limits; every completion's text or none."""
    vocab_size = draw(vocab_sizes)
    max_new_tokens = draw(st.integers(1, max_tokens))
    ids = st.integers(0, vocab_size - 1)
    with_texts = draw(st.booleans())
    groups = []
    for g in range(draw(st.integers(1, max_groups))):
        completions = []
        for _ in range(draw(st.integers(1, max_group_size))):
            n = draw(st.integers(1, max_new_tokens))
            q = draw(st.lists(st.one_of(st.integers(0, 4096), st.just(MAX_Q)), min_size=n, max_size=n))
            completions.append(Completion(
                token_ids=np.array(draw(st.lists(ids, min_size=n, max_size=n)), np.int64),
                sampler_logprobs=-np.array(q, np.float64) * LOGPROB_STEP,  # (n,)
                reward=draw(st.floats(allow_nan=False, allow_infinity=False)),
                finish_reason=draw(st.sampled_from(FINISH_REASONS)),
                text="".join(draw(st.lists(texts, min_size=n, max_size=n))) if with_texts else None,
            ))
        prompt = np.array(draw(st.lists(ids, min_size=1, max_size=max_tokens)), np.int64)
        task = TaskRef(draw(names), draw(strings(MAX_NAME_CHARS, min_size=0)), draw(int64s),
                       draw(strings(MAX_ANSWER_CHARS, min_size=0)))
        group_id = f"{g}:{draw(strings(MAX_NAME_CHARS - 8, min_size=0))}"  # unique within the batch
        groups.append(Group(group_id, task, prompt, tuple(completions)))
    return RolloutBatch(
        run_id=draw(names), peer_id=draw(names), round=draw(rounds), created_at=draw(times),
        policy=PolicyInfo(draw(names), draw(strings(MAX_NAME_CHARS, min_size=0)), draw(st.sampled_from(ADAPTERS)),
                          draw(int64s)),
        tokenizer=TokenizerInfo(draw(names), vocab_size),
        sampling=SamplingSettings(draw(st.floats(MIN_TEMPERATURE, MAX_TEMPERATURE)), draw(st.floats(1e-9, 1.0)),
                                  draw(st.integers(0, MAX_VOCAB_SIZE)), max_new_tokens),
        groups=tuple(groups),
    )


@st.composite
def descriptors(draw: st.DrawFn, round_: int) -> BatchDescriptor:
    return BatchDescriptor(
        round=round_, groups=draw(st.integers(1, MAX_GROUPS)), tokens=draw(st.integers(1, MAX_BATCH_TOKENS)),
        bytes=draw(st.integers(1, MAX_PAYLOAD_BYTES)), sha256=hashlib.sha256(draw(st.binary(max_size=8))).digest(),
        policy_version=draw(int64s), created_at=draw(times),
    )


_RELAY_IDS = st.text("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", min_size=32, max_size=60)
_CIRCUITS = st.builds(lambda ip, port, relay: f"/ip4/{ip}/tcp/{port}/p2p/{relay}/p2p-circuit",
                      st.ip_addresses(v=4), st.integers(0, 65535), _RELAY_IDS)
reaches = st.one_of(
    st.builds(Reach, st.sampled_from(("unknown", "direct", "unreachable"))),
    st.builds(lambda addrs: Reach("relayed", tuple(addrs)),
              st.lists(_CIRCUITS, min_size=1, max_size=MAX_RELAY_ADDRS, unique=True)),
)


@st.composite
def announcements(draw: st.DrawFn) -> Announcement:
    numbers = draw(st.lists(rounds, max_size=MAX_ANNOUNCED_BATCHES, unique=True))
    return Announcement(
        run_id=draw(names), peer_id=draw(names), model=draw(names),
        adapter=draw(st.sampled_from(ADAPTERS)), tokenizer=draw(names), policy_version=draw(int64s),
        published_batches=draw(int64s), published_tokens=draw(int64s), updated_at=draw(times),
        batches=tuple(draw(descriptors(round_)) for round_ in numbers), reach=draw(reaches),
    )


# Any msgpack value, the interesting ones and those on a limit first.
values = st.one_of(
    st.sampled_from(INTERESTING_VALUES), st.sampled_from(BOUNDARY_INTS), st.sampled_from(BOUNDARY_FLOATS),
    st.integers(-(1 << 63), (1 << 64) - 1), st.floats(), st.text(max_size=300), st.binary(max_size=64),
    st.lists(st.integers(0, 300), max_size=5), st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=3)),
)


@st.composite
def near_valid(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed message with one to three values replaced by drawn ones (then, for a batch, the token column
    remade to the size the new counts imply, half of the time)."""
    message = unpack(draw(st.sampled_from(seeds)))
    nodes = all_nodes(message)
    for _ in range(draw(st.integers(1, 3))):
        container, key = nodes[draw(st.integers(0, len(nodes) - 1))]
        container[key] = draw(values)
    body = message.get("body")
    if isinstance(body, dict) and isinstance(body.get("tokens"), dict) and draw(st.booleans()):
        reframe(random.Random(draw(st.integers(0, 1 << 32))), body)
    return pack(message)
