"""``[generation] weights = "int8"``: the transformers backend samples an int8 copy of the policy
(``node/generation/int8.py``). What it records is the copy's own distribution (sampled tokens come as often as their
recorded log-probs say, and those log-probs are the copy's, not the trainer's), the copy follows the trainer after a
step, and the trainer's importance weight sees the difference, which it does not for float32 sampling.

Run: python -m pytest tests/test_generation_int8.py -q
"""

import numpy as np
import pytest
import torch
from helpers.nodes import make_node
from transformers import LlamaConfig, LlamaForCausalLM

from ftis.node.config import GenerationConfig
from ftis.node.generation.hf import TransformersGenerator
from ftis.node.generation.int8 import int8_copy
from ftis.node.swarm.memory import MemoryHub
from ftis.protocol import SamplingSettings

VOCAB, EOS = 24, 2
PROMPT = np.array([1, 5, 6, 7, 8])
DRAWS = 4096  # first tokens drawn: a frequency's standard error is at most 0.8 points


@pytest.fixture()
def model() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         initializer_range=0.3, bos_token_id=1, eos_token_id=EOS, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def first_token_logprobs(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor(PROMPT)[None]).logits[0, -1].float(), -1)


def first_tokens(generator: TransformersGenerator, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    (group,) = generator.generate([PROMPT], DRAWS, SamplingSettings(1.0, 1.0, 0, 1), seed=seed)
    return (np.array([c.token_ids[0] for c in group]), np.array([c.sampler_logprobs[0] for c in group]))


def test_int8_samples_follow_their_recorded_logprobs_which_are_the_copys_not_the_trainers(model):
    generator = TransformersGenerator(model, eos_token_ids=EOS, batch_size=DRAWS, weights="int8")
    assert generator.sampled is not model
    tokens, recorded = first_tokens(generator)
    # every row is the same prompt, so one distribution: each token drawn has one recorded log-prob
    drawn = np.unique(tokens)
    logprob = {token: recorded[tokens == token] for token in drawn}
    assert all(np.ptp(values) < 1e-5 for values in logprob.values())
    # ...which says how often it comes (the copy's activations are quantized per pass, so its log-probs are those
    # of the sampler's own passes: what a teacher-forced pass of the copy gives differs by the quantization)
    frequencies = np.array([np.mean(tokens == token) for token in drawn])
    probabilities = np.exp([logprob[token][0] for token in drawn])
    error = np.sqrt(probabilities * (1 - probabilities) / DRAWS)
    assert np.all(np.abs(frequencies - probabilities) < 5 * error + 1e-3), (frequencies, probabilities)
    assert probabilities.sum() > 0.95  # the tokens never drawn are rare
    # ...and they are not the trainer's: quantization moved them
    float32 = first_token_logprobs(model).numpy()
    assert max(abs(logprob[token][0] - float32[token]) for token in drawn) > 1e-3


def test_the_copy_is_made_again_from_the_trainers_weights_after_a_step_and_only_then(model):
    generator = TransformersGenerator(model, eos_token_ids=EOS, batch_size=DRAWS, weights="int8")
    before = first_token_logprobs(generator.sampled)
    with torch.no_grad():  # what a step does to the trainer's model
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    generator.sync_weights(generator.policy_version)  # the same version: nothing moved
    assert torch.equal(first_token_logprobs(generator.sampled), before)
    generator.sync_weights(generator.policy_version + 1)
    after = first_token_logprobs(generator.sampled)
    assert torch.allclose(after, first_token_logprobs(int8_copy(model)), atol=1e-6)
    assert (after - before).abs().max() > 1e-2
    assert all(parameter.requires_grad for parameter in model.parameters())


def test_float32_sampling_uses_the_trainers_model_itself(model):
    generator = TransformersGenerator(model, eos_token_ids=EOS)
    assert generator.sampled is model
    generator.sync_weights(1)
    assert generator.sampled is model


def test_a_node_sampling_int8_sees_its_own_samples_off_policy_and_float32_on_policy():
    weights = {}
    for name in ("float32", "int8"):
        node = make_node(MemoryHub(), name, generation={"prompts_per_round": 4, "group_size": 8, "max_new_tokens": 6,
                                                      "weights": name})
        reports = [node.run_round() for _ in range(2)]
        weights[name] = [report.step.is_weight_mean for report in reports if report.step is not None]
    assert weights["float32"] and all(abs(w - 1) < 1e-4 for w in weights["float32"]), weights
    assert weights["int8"] and any(abs(w - 1) > 1e-4 for w in weights["int8"]), weights


def test_int8_with_the_vllm_backend_is_refused_with_the_reason():
    with pytest.raises(ValueError, match='weights = "int8" is the transformers backend'):
        GenerationConfig(backend="vllm", weights="int8")
