"""The trainer's log-probs against the obvious computation: the model's full logits at every position, divided
by the temperature, log-softmaxed, read at each completion token. Both layouts (one row per completion, and each
distinct prompt once with the completions on its KV cache, in length buckets), values and gradients, on the
tiny models, LoRA, a Gemma 3 with a sliding window shorter than the prompts, a softcapped Gemma 2, the Qwen2
stand-in, and the real SmolLM2 and Gemma 3 where ``ftis-node models fetch --all`` put them."""

import numpy as np
import pytest
import torch
from helpers.real_models import real_model
from helpers.real_tokenizers import real_tokenizer
from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaForCausalLM

from ftis.node.models import load_policy
from ftis.node.prompt_prefix import MIN_SHARED_PREFIX, shared_prefix
from ftis.node.trainer import logprobs
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs, output_layer, shares_prompts
from ftis.node.trainer.packing import PackedBatch, length_buckets, pack, padded_tokens
from ftis.protocol.schema import CompletionColumns

TEMPERATURES = (1.0, 0.7, 1.3)


def naive_logprobs(model: torch.nn.Module, packed: PackedBatch) -> torch.Tensor:
    """(B, T) float64: the model's full (B, L, V) logits / T, log-softmaxed, at each completion token; 0 on padding.
    In float64 from the logits on: a float32 log-softmax over Gemma's 262,144 entries is off by up to 1e-4 (the
    trainer's logsumexp by 2e-6), which would hide what the test is after."""
    logits = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask).logits.double()
    logp = torch.log_softmax(logits / packed.temperature[:, None, None].double(), dim=-1)  # (B, L, V)
    rows = torch.arange(logp.shape[0])[:, None]
    chosen = logp[rows, packed.target_index].gather(-1, packed.completion_ids[..., None]).squeeze(-1)
    return chosen * packed.loss_mask


def make_groups(vocab: int, prompt_lengths: list[int], *, seed: int = 0, max_length: int = 6,
                shared_prompt: bool = False, prefix: int = 0) -> list[TrainingGroup]:
    """One group of 4 completions (1..max_length tokens, one of them empty) per prompt length, each at its own
    temperature; ``shared_prompt``: every group gets the first group's prompt (horizontal mode); ``prefix``: every
    prompt starts with the same ``prefix`` tokens (solved examples) before its own."""
    rng = np.random.default_rng(seed)
    head = rng.integers(3, vocab, size=prefix)
    groups, first_prompt = [], None
    for k, length in enumerate(prompt_lengths):
        lengths = np.array([max_length, *rng.integers(1, max_length + 1, size=2), 0 if k == 0 else 1], np.int64)
        columns = CompletionColumns(
            token_ids=rng.integers(3, vocab, size=int(lengths.sum())),
            sampler_logprobs=np.full(int(lengths.sum()), -1.0, np.float32), lengths=lengths,
            rewards=np.zeros(4), finish_reasons=("stop",) * 4)
        prompt = np.concatenate([head, rng.integers(3, vocab, size=length)])
        first_prompt = prompt if first_prompt is None else first_prompt
        groups.append(TrainingGroup(f"g{k}", "me", first_prompt if shared_prompt else prompt, columns,
                                    np.array([1.0, 0.0, 1.0, 0.0]), False, TEMPERATURES[k % len(TEMPERATURES)]))
    return groups


def weighted_gradients(model: torch.nn.Module, values: torch.Tensor, names: set[str] | None) -> dict:
    """Gradients of a fixed random weighting of ``values`` (all trainable parameters, or those named)."""
    model.zero_grad(set_to_none=True)
    weights = torch.randn(values.shape, generator=torch.Generator().manual_seed(0))
    (values * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()
             if p.grad is not None and (names is None or name in names)}
    model.zero_grad(set_to_none=True)
    return grads


def check_against_naive(model: torch.nn.Module, groups: list[TrainingGroup], *, shared_atol: float = 1e-5,
                        grad_names: set[str] | None = None, gradients: bool = True) -> None:
    """Both layouts equal the naive log-probs, and their gradients the naive gradients. The rows layout runs the
    same decoder as the naive forward: 1e-5. The shared layout's hidden states are another float32 computation
    of the same function (``shared_atol``)."""
    model.train()  # the trainer's mode; the models here have no dropout
    packed = pack(groups)
    with torch.set_grad_enabled(gradients):
        expected = naive_logprobs(model, packed)
    expected_grads = weighted_gradients(model, expected, grad_names) if gradients else {}
    assert expected_grads or not gradients, "no trainable parameter got a gradient"
    for shared in (False, True):
        with torch.set_grad_enabled(gradients):
            got = completion_logprobs(model, packed, shared_prompts=shared)
        assert got.dtype == torch.promote_types(next(model.parameters()).dtype, torch.float32)
        atol, rtol = (shared_atol, shared_atol / 10) if shared else (1e-5, 0.0)
        torch.testing.assert_close(got.double(), expected.detach(), atol=atol, rtol=rtol)
        if not gradients:
            continue
        grads = weighted_gradients(model, got, grad_names)
        assert grads.keys() == expected_grads.keys()
        for name, grad in grads.items():
            scale = float(expected_grads[name].abs().max()) or 1.0
            torch.testing.assert_close(grad, expected_grads[name], atol=1e-4 * scale, rtol=1e-3, msg=name)


def perturb_lora(model: torch.nn.Module) -> torch.nn.Module:
    """LoRA's B starts at zero, which would make the adapter invisible: give it small random values."""
    with torch.no_grad():
        generator = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    return model


def tiny_gemma3() -> Gemma3ForCausalLM:
    """A window of 4 tokens in two of its three layers: the prompts here (up to 9) and completions reach past it."""
    torch.manual_seed(0)
    return Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, sliding_window=4, max_position_embeddings=64,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"]))


def tiny_gemma2() -> Gemma2ForCausalLM:
    """Gemma 2's logits are softcapped (``final_logit_softcapping``); a cap of 2 bends these logits visibly."""
    torch.manual_seed(0)
    return Gemma2ForCausalLM(Gemma2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, sliding_window=4, final_logit_softcapping=2.0,
        max_position_embeddings=64))


PROMPTS = [3, 9, 1, 7]  # left padding of up to 8 in the shared layout; past tiny_gemma3's window


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_tiny_small_equals_the_full_logits(adapter):
    policy = load_policy("tiny-small", adapter=adapter, lora_rank=4, lora_alpha=8)
    model = perturb_lora(policy.model) if adapter == "lora" else policy.model
    check_against_naive(model, make_groups(len(policy.tokenizer), PROMPTS))


@pytest.mark.parametrize("build", [tiny_gemma3, tiny_gemma2], ids=["gemma3-sliding-window", "gemma2-softcap"])
def test_gemma_layouts_equal_the_full_logits(build):
    model = build()
    assert output_layer(model) is not None and shares_prompts(model)
    check_against_naive(model, make_groups(64, PROMPTS))
    check_against_naive(model, make_groups(64, [5, 2], max_length=9))  # completions alone past the window


def test_the_layouts_agree_in_float64_past_the_window():
    # (Not Gemma 2: transformers' eager attention, which its attention softcapping needs, is NaN in float64.)
    check_layouts_in_float64(tiny_gemma3(), make_groups(64, [30, 2], max_length=9))
    policy = load_policy("tiny-small")
    check_layouts_in_float64(policy.model, make_groups(len(policy.tokenizer), [30, 2], max_length=9))


def test_qwen2_stand_in_equals_the_full_logits(tmp_path):
    from ftis.node.models.stand_in import build_stand_in

    folder = build_stand_in(real_tokenizer("qwen2"), tmp_path / "stand-in")
    for adapter in ("full", "lora"):
        policy = load_policy(str(folder), adapter=adapter, lora_rank=4, lora_alpha=8)
        model = perturb_lora(policy.model) if adapter == "lora" else policy.model
        check_against_naive(model, make_groups(len(policy.tokenizer), PROMPTS))



# Each model as the real-model demo trains it (examples/demo-real.toml); the other pairings are the same code
# (check_real_model runs any by hand).
@pytest.mark.parametrize(("name", "adapter"), [("smollm2-135m-instruct", "full"), ("gemma-3-270m", "lora")])
def test_real_models_equal_the_full_logits(name, adapter):
    check_real_model(str(real_model(name)), adapter, gradients=True)


def test_a_real_model_s_layouts_agree_in_float64():
    # Gemma 3's sliding window is covered by tiny_gemma3 above; real Gemma past its 512-token window in float64 is
    # half a minute of this machine (check_layouts_in_float64 runs it by hand).
    policy = load_policy(str(real_model("smollm2-135m-instruct")))
    check_layouts_in_float64(policy.model, make_groups(len(policy.tokenizer), [40, 12]))


def check_real_model(folder: str, adapter: str, *, gradients: bool) -> None:
    """(Also run by hand on a folder.) Against the naive log-probs on prompts of 12-40 tokens, in float32 as a
    node runs: the shared layout's float32 arithmetic in another order moves a log-prob by up to ~1e-4 (5e-6 of
    its size; measured on Gemma 3 with LoRA). Gradients: every LoRA parameter, or (full fine-tuning) the
    embedding, which the output layer shares, and a few more; not for Gemma 3 in full, where the naive
    computation's (B, L, 262,144) float64 logits and their gradient are minutes of this machine."""
    policy = load_policy(folder, adapter=adapter, lora_rank=8, lora_alpha=16)
    model = perturb_lora(policy.model) if adapter == "lora" else policy.model
    names = {"model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight", "model.norm.weight"}
    check_against_naive(model, make_groups(len(policy.tokenizer), [12, 40], max_length=8), shared_atol=1e-4,
                        grad_names=None if adapter == "lora" else names, gradients=gradients)


def check_layouts_in_float64(model: torch.nn.Module, groups: list[TrainingGroup]) -> None:
    """The two layouts are the same function: in float64 they agree to 1e-9 (measured: bit for bit)."""
    packed = pack(groups)
    model.double()
    try:
        with torch.no_grad():
            rows = completion_logprobs(model, packed, shared_prompts=False)
            shared = completion_logprobs(model, packed, shared_prompts=True)
    finally:
        model.float()
    assert rows.dtype == torch.float64
    torch.testing.assert_close(shared, rows, atol=1e-9, rtol=0)


def test_a_horizontal_advantage_group_computes_its_prompt_once():
    model = tiny_gemma3()
    groups = make_groups(64, [6, 6, 6], shared_prompt=True)
    packed = pack(groups)
    assert packed.prompt_ids.shape[0] == 1 and packed.prompt_index.tolist() == [0] * 12
    check_against_naive(model, groups)


def test_chunks_of_the_output_layer_change_nothing(monkeypatch):
    model = tiny_gemma2()
    packed = pack(make_groups(64, PROMPTS))
    whole = completion_logprobs(model, packed)
    monkeypatch.setattr(logprobs, "CHUNK_LOGITS", 3 * 64)  # three positions a chunk
    torch.testing.assert_close(completion_logprobs(model, packed), whole, atol=1e-6, rtol=0)
    check_against_naive(model, make_groups(64, PROMPTS))


class ScaledLogits(LlamaForCausalLM):
    """A model whose forward scales its logits after the output layer (as Cohere's and Granite's do)."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 3.0
        return out


class FixedLogits(torch.nn.Module):
    """Not a transformers model: logits from a table by the previous token."""

    def __init__(self, vocab: int):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))

    def forward(self, input_ids, attention_mask=None):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_a_model_whose_logits_are_not_its_output_layer_takes_its_own_forward():
    policy = load_policy("tiny-small")
    scaled = ScaledLogits(policy.model.config)
    scaled.load_state_dict(policy.model.state_dict())
    assert output_layer(scaled) is None and not shares_prompts(scaled)
    check_against_naive(scaled, make_groups(len(policy.tokenizer), PROMPTS))
    fake = FixedLogits(40)
    assert output_layer(fake) is None
    check_against_naive(fake, make_groups(40, PROMPTS))


def test_length_buckets_pad_each_run_to_its_own_longest():
    lengths = [12, 6, 13, 128, 128, 85, 9, 12]  # one group SmolLM2 sampled on a few-shot prompt
    assert length_buckets(lengths) == [[3, 4, 5], [2, 0, 7, 6], [1]]
    assert length_buckets([]) == [] and length_buckets([0, 0]) == [[0, 1]]
    groups = make_groups(64, [5, 9], max_length=6)  # 8 rows, the longest completions 6 tokens
    assert padded_tokens(groups, shared_prompts=False) == 8 * (9 + 6)  # every row as wide as the widest
    lengths = np.concatenate([g.completions.lengths for g in groups]).tolist()
    buckets = length_buckets(lengths)
    assert padded_tokens(groups) == 2 * 9 + sum(len(b) * lengths[b[0]] for b in buckets) < 8 * (9 + 6)


def test_prompts_sharing_their_first_tokens_compute_them_once():
    prompts = [np.arange(20), np.r_[np.arange(12), 50, 51], np.r_[np.arange(12), 60]]
    assert shared_prefix(prompts) == 12  # where the second prompt departs from the first
    assert shared_prefix([np.arange(20), np.arange(20)]) == 19  # each keeps a token that predicts its completion
    assert shared_prefix([np.arange(20)]) == 0  # one prompt: nothing to share
    assert shared_prefix([np.arange(20), np.r_[np.arange(MIN_SHARED_PREFIX - 1), 99]]) == 0  # too short to pay
    groups = make_groups(64, [1, 5, 3], prefix=12)
    packed = pack(groups)
    assert packed.prompt_prefix == 12
    lengths = np.concatenate([g.completions.lengths for g in groups]).tolist()
    completions = sum(len(b) * lengths[b[0]] for b in length_buckets(lengths))
    assert padded_tokens(groups) == 12 + 3 * 5 + completions  # the prefix once, then each prompt's own 1-5 tokens


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_a_shared_prefix_changes_no_log_prob_and_no_gradient(adapter):
    policy = load_policy("tiny-small", adapter=adapter, lora_rank=4, lora_alpha=8)
    model = perturb_lora(policy.model) if adapter == "lora" else policy.model
    groups = make_groups(len(policy.tokenizer), [1, 5, 3, 2], prefix=12)
    assert pack(groups).prompt_prefix == 12
    check_against_naive(model, groups)
    check_layouts_in_float64(model, groups)


def test_a_sliding_window_sees_a_shared_prefix_only_where_it_reaches_everything():
    wide = tiny_gemma3()
    wide.config.sliding_window = 64  # past every sequence here: the prefix is shared
    check_against_naive(wide, make_groups(64, [1, 5, 3], prefix=10))
    check_layouts_in_float64(wide, make_groups(64, [1, 5, 3], prefix=10))
    narrow = tiny_gemma3()  # a window of 4: each prompt whole, as the padding between would narrow the window
    check_against_naive(narrow, make_groups(64, [1, 5, 3], prefix=10))
    check_layouts_in_float64(narrow, make_groups(64, [1, 5, 3], prefix=10))
