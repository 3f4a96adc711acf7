"""Stop strings (``[generation] stop``, ``generation/stops.py``): a completion ends at the token that completes one.

The rule is checked against the obvious one (the shortest prefix whose text holds a stop string), greedy decoding
with stop strings against greedy decoding without them cut afterwards (what the vLLM backend does), and the
settings' bounds. The contract for every backend is in ``test_generation.py``.
"""

import numpy as np
import pytest
from pydantic import ValidationError

from ftis.node.config import GenerationConfig
from ftis.node.generation.hf import greedy
from ftis.node.generation.stops import StopStrings
from ftis.node.generation.types import GeneratedCompletion
from ftis.node.generation.vllm_backend import cut_at_stop
from ftis.node.models import load_policy


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-small", seed=3)


def first_prefix_holding(tokenizer, ids: list[int], strings: list[str]) -> int | None:
    """The obvious rule: the shortest prefix whose whole text holds a stop string."""
    for n in range(1, len(ids) + 1):
        if any(text in tokenizer.decode(ids[:n]) for text in strings):
            return n
    return None


def test_the_cut_is_the_shortest_prefix_holding_a_stop_string(policy):
    tokenizer = policy.tokenizer
    text = "<think> 12+3=15 </think>\n<answer> 15 </answer>\n\nProblem: 7+7\n<answer> 14 </answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    stop = StopStrings(tokenizer, ["</answer>"])
    n = stop.cut(np.array(ids))
    assert tokenizer.decode(ids[:n]) == "<think> 12+3=15 </think>\n<answer> 15 </answer>"
    assert n == first_prefix_holding(tokenizer, ids, ["</answer>"])
    assert StopStrings(tokenizer, ["Problem", "</think>"]).cut(np.array(ids)) == len(
        tokenizer("<think> 12+3=15 </think>", add_special_tokens=False)["input_ids"])
    assert stop.cut(np.array(ids[: n - 1])) is None  # one token short: not yet complete
    rng = np.random.default_rng(0)
    for _ in range(200):  # random texts over a few characters: the window rule is the obvious one
        random_ids = tokenizer("".join(rng.choice(list("ab+=1 "), size=30)), add_special_tokens=False)["input_ids"]
        strings = ["a+b", "= 1", "bb"]
        assert StopStrings(tokenizer, strings).cut(np.array(random_ids)) == first_prefix_holding(
            tokenizer, random_ids, strings)


def test_greedy_with_stop_strings_is_greedy_without_them_cut(policy):
    tokenizer = policy.tokenizer
    prompts = [np.array(tokenizer(f"{a}+{b}=", add_special_tokens=False)["input_ids"]) for a, b in
               [(1, 2), (30, 4), (5, 66), (7, 8), (12, 34), (9, 9)]]
    plain = greedy(policy.model, prompts, 16, batch_size=4)
    texts = [tokenizer.decode(c.token_ids.tolist()) for c in plain]
    # a piece of the first completion's text: at least that one is cut
    stop = StopStrings(tokenizer, [texts[0][2:4], texts[3][5:6]])
    stopped = greedy(policy.model, prompts, 16, batch_size=4, stop=stop)
    assert sum(c.finish_reason == "stop" and c.num_tokens < 16 for c in stopped) >= 1
    for with_stop, without in zip(stopped, plain, strict=True):
        expected = cut_at_stop(without, stop)
        assert with_stop.token_ids.tolist() == expected.token_ids.tolist()
        assert with_stop.finish_reason == expected.finish_reason


def test_cut_keeps_the_log_probs_of_what_it_keeps(policy):
    tokenizer = policy.tokenizer
    ids = np.array(tokenizer("12</answer>34", add_special_tokens=False)["input_ids"])
    completion = GeneratedCompletion(ids, -np.arange(len(ids), dtype=np.float32) / 10, "length")
    cut = cut_at_stop(completion, StopStrings(tokenizer, ["</answer>"]))
    assert cut.finish_reason == "stop" and tokenizer.decode(cut.token_ids.tolist()) == "12</answer>"
    assert cut.sampler_logprobs.tolist() == completion.sampler_logprobs[: cut.num_tokens].tolist()
    assert cut_at_stop(completion, StopStrings(tokenizer, ["zz"])) is completion


@pytest.mark.parametrize("stop", [[""], ["x" * 65], ["a"] * 9])
def test_stop_settings_out_of_bounds_are_refused(stop):
    with pytest.raises(ValidationError, match="stop"):
        GenerationConfig(stop=stop)
    assert GenerationConfig(stop=["</answer>", "x" * 64]).stop == ["</answer>", "x" * 64]
