"""``[generation] weights = "bfloat16" | "int8"``: the transformers backend samples a copy of the policy in fewer
bits (``node/generation/sampler_copy.py``). What it records is the copy's own distribution (sampled tokens come as
often as their recorded log-probs say, and those log-probs are the copy's, not the trainer's), the copy takes the
trainer's weights after a step (only the layers that train), and the step measures its own samples' mismatch, which
is zero for float32 sampling.

Run: python -m pytest tests/test_generation_copies.py -q
"""

import numpy as np
import pytest
import torch
from helpers.nodes import make_node
from transformers import LlamaConfig, LlamaForCausalLM

from ftis.node.config import GenerationConfig
from ftis.node.generation.hf import TransformersGenerator
from ftis.node.generation.sampler_copy import COPIES, SamplerCopy, sampler_copy
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


@pytest.mark.parametrize("weights", COPIES)
def test_samples_follow_their_recorded_logprobs_which_are_the_copys_not_the_trainers(model, weights):
    generator = TransformersGenerator(model, eos_token_ids=EOS, batch_size=DRAWS, weights=weights)
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
    # ...and they are not the trainer's: fewer bits moved them
    float32 = first_token_logprobs(model).numpy()
    assert max(abs(logprob[token][0] - float32[token]) for token in drawn) > 1e-3


@pytest.mark.parametrize("weights", COPIES)
def test_the_copy_takes_the_trainers_weights_after_a_step_and_only_then(model, weights):
    generator = TransformersGenerator(model, eos_token_ids=EOS, batch_size=DRAWS, weights=weights)
    before = first_token_logprobs(generator.sampled)
    with torch.no_grad():  # what a step does to the trainer's model (the embedding table is shared: read live)
        for parameter in model.parameters():
            if parameter is not model.get_input_embeddings().weight:
                parameter.add_(0.05 * torch.randn_like(parameter))
    generator.sync_weights(generator.policy_version)  # the same version: nothing moved
    assert torch.equal(first_token_logprobs(generator.sampled), before)
    generator.sync_weights(generator.policy_version + 1)
    after = first_token_logprobs(generator.sampled)
    assert torch.allclose(after, first_token_logprobs(sampler_copy(model, weights)), atol=1e-6)
    assert (after - before).abs().max() > 1e-2
    assert all(parameter.requires_grad for parameter in model.parameters())


def perturbed(parameters) -> None:
    with torch.no_grad():
        for parameter in parameters:
            parameter.add_(0.05 * torch.randn_like(parameter))


@pytest.mark.parametrize("weights", COPIES)
def test_a_refreshed_copy_of_a_full_model_with_tied_output_layer_is_a_fresh_copy(weights):
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.3, tie_word_embeddings=True,
                         eos_token_id=EOS, pad_token_id=0)
    torch.manual_seed(1)
    tied = LlamaForCausalLM(config)
    copy = SamplerCopy(tied, weights)
    perturbed(tied.parameters())  # the norms, every linear layer and the table the output layer shares
    copy.refresh()
    assert torch.equal(first_token_logprobs(copy.model), first_token_logprobs(sampler_copy(tied, weights)))
    assert len(copy._linears) == 2 * 7 + 1  # every layer's seven projections and the output layer


@pytest.mark.parametrize("weights", COPIES)
def test_a_lora_copy_converts_again_only_the_adapted_layers(model, weights):
    from peft import LoraConfig, get_peft_model

    adapted = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    copy = SamplerCopy(adapted, weights)
    assert len(copy._linears) == 2 * 2  # q and v of both layers; the output layer and the rest never change
    lora = [parameter for parameter in adapted.parameters() if parameter.requires_grad]
    perturbed(lora)
    assert not torch.equal(first_token_logprobs(sampler_copy(adapted, weights)), first_token_logprobs(copy.model))
    copy.refresh()
    assert torch.equal(first_token_logprobs(copy.model), first_token_logprobs(sampler_copy(adapted, weights)))
    assert all(parameter.requires_grad for parameter in lora)  # the trainer's adapter is untouched, unmerged
    assert any("lora_A" in name for name, _ in adapted.named_parameters())


def test_float32_sampling_uses_the_trainers_model_itself(model):
    generator = TransformersGenerator(model, eos_token_ids=EOS)
    assert generator.sampled is model
    generator.sync_weights(1)
    assert generator.sampled is model


def test_a_node_sampling_a_copy_sees_its_own_samples_off_policy_and_float32_on_policy():
    steps = {}
    for name in ("float32", *COPIES):
        node = make_node(MemoryHub(), name, generation={"prompts_per_round": 4, "group_size": 8, "max_new_tokens": 6,
                                                      "weights": name})
        steps[name] = [report.step for report in (node.run_round() for _ in range(2)) if report.step.trained]
    assert all(steps.values()), steps
    for step in steps["float32"]:  # the trainer's own model sampled: the same log-probs, ratios of 1
        assert step.own_logprob_gap < 1e-5 and step.own_ratio_outside == 0 and abs(step.is_weight_mean - 1) < 1e-4
    for name in COPIES:  # the copy's log-probs differ from the trainer's, token by token; the IS weight corrects it
        assert all(step.own_logprob_gap > 1e-4 for step in steps[name]), (name, steps[name])
    assert max(step.own_logprob_gap for step in steps["int8"]) > max(step.own_logprob_gap for step in steps["bfloat16"])
    assert all(step.own_filtered_fraction == 0 for name in steps for step in steps[name])  # the filter: peers' only


@pytest.mark.parametrize("weights", COPIES)
def test_a_copy_with_the_vllm_backend_is_refused_with_the_reason(weights):
    with pytest.raises(ValueError, match=f'weights = "{weights}" is the transformers backend'):
        GenerationConfig(backend="vllm", weights=weights)
