"""The schema's two forms of a group's completions (objects and columns) describe the same data,
and groups are immutable, comparable, replaceable and picklable like the dataclasses around them."""

import dataclasses
import pickle

import numpy as np
import pytest

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
from ftis.protocol.schema import CompletionColumns

TASK = TaskRef("arith", "train", 3, "12")


def _completions() -> tuple[Completion, ...]:
    return (
        Completion(np.array([5, 6, 7]), np.array([-0.5, 0.0, -1.25], np.float32), 1.0, "stop"),
        Completion(np.array([8]), np.array([-2.0], np.float32), 0.0, "length"),
        Completion(np.array([9, 10]), np.array([-0.125, -3.0], np.float32), 0.5, "stop"),
    )


def _batch(groups: tuple[Group, ...], **changes) -> RolloutBatch:
    fields = dict(
        run_id="r", peer_id="p", round=1, created_at=1.0, policy=PolicyInfo("m", "", "full", 0),
        tokenizer=TokenizerInfo("fp", 100), sampling=SamplingSettings(1.0, 1.0, 0, 8), groups=groups,
    )
    return RolloutBatch(**{**fields, **changes})


def test_columns_of_a_group_built_from_completions():
    columns = Group("g", TASK, np.array([1, 2]), _completions()).columns
    assert columns.token_ids.tolist() == [5, 6, 7, 8, 9, 10]
    assert columns.sampler_logprobs.tolist() == [-0.5, 0.0, -1.25, -2.0, -0.125, -3.0]
    assert columns.lengths.tolist() == [3, 1, 2]
    assert columns.rewards.tolist() == [1.0, 0.0, 0.5]
    assert columns.finish_reasons == ("stop", "length", "stop")


def test_completions_of_a_group_built_from_columns_are_equal_views():
    built = Group("g", TASK, np.array([1, 2]), _completions())
    from_columns = Group.from_columns("g", TASK, np.array([1, 2]), built.columns)
    assert from_columns == built
    assert from_columns.size == 3
    assert from_columns.completions == built.completions
    assert np.shares_memory(from_columns.completions[2].token_ids, built.columns.token_ids)


def test_decoded_groups_keep_columns_and_give_completions_on_demand():
    groups = (Group("g0", TASK, np.array([1, 2]), _completions()), Group("g1", TASK, np.array([3]), _completions()[:1]))
    decoded = decode(encode(_batch(groups)))
    assert decoded.groups == groups
    assert decoded.num_completions == 4
    assert decoded.num_completion_tokens == 9
    assert decoded.groups[1].columns.token_ids.tolist() == [5, 6, 7]
    assert not decoded.groups[0].columns.token_ids.flags.writeable


def test_zero_logprob_decodes_as_positive_zero():
    decoded = decode(encode(_batch((Group("g", TASK, np.array([1]), _completions()),))))
    zero = decoded.groups[0].completions[0].sampler_logprobs[1]
    assert zero == 0.0 and not np.signbit(zero)


def test_groups_are_immutable():
    group = Group("g", TASK, np.array([1]), _completions())
    with pytest.raises(AttributeError):
        group.group_id = "other"
    with pytest.raises(AttributeError):
        del group.task


def test_replace_changes_only_what_it_names():
    group = decode(encode(_batch((Group("g", TASK, np.array([1]), _completions()),)))).groups[0]
    renamed = group.replace(group_id="h")
    assert renamed.group_id == "h" and renamed.completions == group.completions
    shorter = group.replace(completions=group.completions[:1])
    assert shorter.size == 1 and shorter.task == TASK


def test_groups_pickle_in_either_form():
    built = Group("g", TASK, np.array([1]), _completions())
    decoded = decode(encode(_batch((built,)))).groups[0]
    for group in (built, decoded):
        assert pickle.loads(pickle.dumps(group)) == built


def test_numpy_scalars_in_metadata_travel_as_numbers():
    group = Group("g", dataclasses.replace(TASK, index=np.int64(3)), np.array([1]), _completions())
    batch = _batch((group,), round=np.int64(9), created_at=np.float64(2.5))
    decoded = decode(encode(batch))
    assert decoded.round == 9 and type(decoded.round) is int
    assert decoded.created_at == 2.5 and decoded.groups[0].task.index == 3


def test_columns_refuse_completions_whose_parts_do_not_match():
    bad = (Completion(np.array([1, 2]), np.array([-0.1], np.float32), 0.0, "stop"),)
    with pytest.raises(ValueError, match=r"completions\[0\]\.sampler_logprobs"):
        CompletionColumns.from_completions(bad)


def test_decoded_columns_are_read_only():
    decoded = decode(encode(_batch((Group("g", TASK, np.array([1]), _completions()),))))
    columns = decoded.groups[0].columns
    for array in (columns.token_ids, columns.sampler_logprobs, columns.lengths, columns.rewards,
                  decoded.groups[0].prompt_ids):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0
