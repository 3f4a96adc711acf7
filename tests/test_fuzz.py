"""The fuzzer's short run: mutation and property-based fuzzing of the protocol decoders and of the
node's announcement handling, with the limit oracle and the memory bound (``benchmarks/fuzzing/oracle.py``), and the
regressions it found.

Run: python -m pytest tests/test_fuzz.py -q      (the long run: python -m benchmarks.fuzz)

Seeded and derandomised: the same inputs on every run.
"""

import dataclasses
import importlib
import random
from collections import Counter

import pytest
from hivemind.utils.timed_storage import ValueWithExpiration
from hypothesis import given, settings

from benchmarks.fuzzing.inputs import (
    ANNOUNCEMENT_MUTATIONS,
    MUTATIONS,
    announcement_seeds,
    batch_seeds,
    mutate,
    seed_batch,
)
from benchmarks.fuzzing.oracle import ANNOUNCEMENT, BATCH, MEMORY_CONSTANT, Violation, check_batch, judge
from benchmarks.fuzzing.strategies import announcements, batches, near_valid
from benchmarks.fuzzing.swarm import DirectoryFuzz, InboxFuzz, make_owners
from ftis.node.swarm.dht.directory import Directory
from ftis.node.swarm.exchange import inbox as inbox_module
from ftis.protocol import TokenizerInfo, decode, encode
from ftis.protocol.announcement import encode_announcement

BATCH_SEEDS = list(batch_seeds().values())
ANNOUNCEMENT_SEEDS = list(announcement_seeds().values())
FUZZ = settings(derandomize=True, database=None, deadline=None)


def test_every_seed_is_accepted_and_passes_the_oracle():
    for data in BATCH_SEEDS:
        assert judge(BATCH, data).field is None
    for data in ANNOUNCEMENT_SEEDS:
        assert judge(ANNOUNCEMENT, data).field is None


def test_mutation_fuzz_of_the_decoders():
    rng = random.Random(7)
    outcomes, used = Counter(), Counter()
    for i in range(3000):
        target, seeds, kinds = ((ANNOUNCEMENT, ANNOUNCEMENT_SEEDS, ANNOUNCEMENT_MUTATIONS) if i % 4 == 0
                                else (BATCH, BATCH_SEEDS, MUTATIONS))
        kind, data = mutate(rng, seeds, kinds)
        outcome = judge(target, data)
        outcomes[target.name, "accepted" if outcome.field is None else "refused"] += 1
        used[kind] += 1
    assert set(used) == set(MUTATIONS)
    assert min(outcomes.values()) > 50 and len(outcomes) == 4, outcomes  # both accept and refuse (>1 in 8)


def test_mutations_of_the_texts_seed_reach_the_text_column():
    rng, fields = random.Random(13), Counter()
    seeds = [batch_seeds()["texts"]]
    for _ in range(800):
        _, data = mutate(rng, seeds, ["retokenize", "recount", "column_bit_flip", "boundary_value"])
        fields[judge(BATCH, data).field] += 1
    assert fields[None] > 20, fields  # some are accepted, texts and all, and pass the oracle
    assert fields["body.texts.data"] > 20 and fields["body.texts.length"] > 0, fields  # UTF-8, frames, bounds


@settings(FUZZ, max_examples=60)
@given(batches())
def test_any_batch_within_the_limits_round_trips(batch):
    assert judge(BATCH, encode(batch)).field is None


@settings(FUZZ, max_examples=150)
@given(near_valid(BATCH_SEEDS))
def test_near_valid_batches(data):
    judge(BATCH, data)


@settings(FUZZ, max_examples=80)
@given(announcements())
def test_any_announcement_within_the_limits_round_trips(announcement):
    assert judge(ANNOUNCEMENT, encode_announcement(announcement)).field is None


@settings(FUZZ, max_examples=150)
@given(near_valid(ANNOUNCEMENT_SEEDS))
def test_near_valid_announcements(data):
    judge(ANNOUNCEMENT, data)


def test_directory_and_inbox_fuzz():
    rng = random.Random(11)
    directory, inbox = DirectoryFuzz(make_owners(3)), InboxFuzz()
    steps = Counter(directory.step(rng) for _ in range(300))
    steps.update(inbox.step(rng) for _ in range(600))
    assert {"directory_read", "inbox_announce", "inbox_deliver", "inbox_fail"} <= set(steps), steps
    assert inbox.inbox.stats().delivered_batches > 0


# --- the oracle can fail ----------------------------------------------------------------------------


def test_the_limit_oracle_sees_a_broken_limit():
    data = encode(seed_batch(vocab_size=200))  # its ids reach 199
    with pytest.raises(Violation, match="an id outside"):
        check_batch(dataclasses.replace(decode(data), tokenizer=TokenizerInfo("sha256:abc", 100)), data)


def test_the_memory_oracle_sees_an_allocation_the_input_does_not_back(monkeypatch):
    envelope_module = importlib.import_module("ftis.protocol.envelope")
    monkeypatch.setattr(envelope_module, "check_shape", lambda data, bounds: None)  # unpacking before any walk
    with pytest.raises(Violation, match="over the bound"):
        judge(BATCH, NESTED_CLAIMS)


def test_the_inbox_harness_sees_state_that_is_never_forgotten(monkeypatch):
    monkeypatch.setattr(inbox_module, "MAX_CLOCK_AHEAD_S", 1e12)  # the inbox before it capped dates ahead of now
    harness, rng = InboxFuzz(), random.Random(11)
    with pytest.raises(Violation, match="still remembered"):
        for _ in range(2000):
            harness.step(rng)


# --- regressions ------------------------------------------------------------------------------------

NESTED_CLAIMS = b"\xdc\x10\x00" * 1000  # 1000 nested arrays, each claiming 4096 items: 3 KB, and nothing more


@pytest.mark.parametrize("target", [BATCH, ANNOUNCEMENT], ids=lambda t: t.name)
@pytest.mark.parametrize("data", [NESTED_CLAIMS, NESTED_CLAIMS[:30], b"\xdd\xff\xff\xff\xff" * 10],
                         ids=["3KB", "30B", "array32"])
def test_claimed_lengths_are_not_allocated_before_the_items_are_there(target, data):
    # msgpack allocated each array's claim as it read the header: 33 MB for these 3 KB before the fix.
    outcome = judge(target, data)
    assert outcome.field == "payload"
    assert outcome.peak < MEMORY_CONSTANT


def test_the_directory_remembers_only_the_owner_keys_it_reads():
    owners = make_owners(2)
    directory = Directory()

    def read(owner):
        record = ValueWithExpiration(b"not an announcement", 0.0)
        return directory.read([ValueWithExpiration({owner.subkey: record, b"garbage": record}, 0.0)])

    assert [peer for peer, _ in read(owners[0]).rejected] == [owners[0].peer_id]
    assert [peer for peer, _ in read(owners[1]).rejected] == [owners[1].peer_id]
    assert set(directory._owners) == {owners[1].subkey, b"garbage"}  # owners[0]'s key went with its entry
