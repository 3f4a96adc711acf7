"""The trainer: packing reads each completion token's log-prob at the right position (one row per completion, or
each prompt once), micro-batching and gradient checkpointing do not change the gradient, a step trains (full or
LoRA) and reports its metrics, and groups with equal rewards cost nothing. (``test_logprobs.py``: the log-probs on
real architectures.)"""

import copy
import dataclasses

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ftis.node.config import LossConfig, TrainerConfig
from ftis.node.trainer.groups import TrainingGroup, advantage_groups
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import micro_batches, pack, padded_tokens
from ftis.node.trainer.trainer import Trainer
from ftis.protocol.limits import MIN_LOGPROB
from ftis.protocol.schema import CompletionColumns

VOCAB = 40


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def make_group(rng: np.random.Generator, name: str, rewards: list[float], *, off_policy: bool = False,
               temperature: float = 1.0, prompt_length: int | None = None) -> TrainingGroup:
    lengths = rng.integers(1, 7, size=len(rewards))
    ids = rng.integers(1, VOCAB, size=int(lengths.sum()))
    columns = CompletionColumns(
        token_ids=ids,
        sampler_logprobs=-rng.exponential(1.0, size=int(lengths.sum())).astype(np.float32),
        lengths=lengths.astype(np.int64),
        rewards=np.zeros(len(rewards)),
        finish_reasons=tuple("stop" for _ in rewards),
    )
    prompt = rng.integers(1, VOCAB, size=prompt_length or int(rng.integers(1, 6)))
    return TrainingGroup(name, "peer" if off_policy else "me", prompt, columns, np.array(rewards, float),
                         off_policy, temperature)


def naive_logprobs(model, group: TrainingGroup) -> list[list[float]]:
    """Each completion alone, unpadded: log_softmax(logits / T) at the position before each token."""
    result, start = [], 0
    for length in group.completions.lengths.tolist():
        completion = group.completions.token_ids[start : start + length]
        start += length
        ids = torch.tensor(np.concatenate([group.prompt_ids, completion]))[None]
        logits = model(input_ids=ids).logits[0].float() / group.temperature
        logp = torch.log_softmax(logits, -1)
        p = len(group.prompt_ids)
        result.append([float(logp[p + j - 1, completion[j]]) for j in range(length)])
    return result


@pytest.mark.parametrize("shared_prompts", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_logprobs_equal_each_sequence_alone(temperature, shared_prompts):
    model = tiny_model().eval()
    rng = np.random.default_rng(0)
    groups = [make_group(rng, f"g{k}", [1.0, 0.0, 1.0], temperature=temperature) for k in range(3)]
    packed = pack(groups)
    with torch.no_grad():
        got = completion_logprobs(model, packed, shared_prompts)
        row = 0
        for group in groups:
            for expected in naive_logprobs(model, group):
                assert packed.loss_mask[row].sum() == len(expected)
                # float32 CPU; padding on the right changes no earlier position under causal attention
                np.testing.assert_allclose(got[row, : len(expected)].numpy(), expected, atol=1e-5)
                row += 1


@pytest.mark.parametrize("shared_prompts", [False, True])
def test_micro_batches_hold_whole_groups_within_the_token_bound_and_split_only_those_too_large(shared_prompts):
    rng = np.random.default_rng(1)
    groups = [dataclasses.replace(group, advantages=np.linspace(-1, 1, group.size))
              for group in (make_group(rng, f"g{k}", [1.0, 0.0, 1.0, 0.0], prompt_length=4) for k in range(5))]
    chunks = [micro.groups for micro in micro_batches(advantage_groups(groups), 30, shared_prompts)]
    for chunk in chunks:
        rows = sum(g.size for g in chunk)
        assert rows == 1 or padded_tokens(chunk, shared_prompts) <= 30  # a single row longer than the bound: alone
        width = max(len(g.prompt_ids) + int(g.completions.lengths.max()) for g in chunk)
        assert padded_tokens(chunk, shared_prompts=False) == rows * width  # one row per completion, prompt included
    # every completion once, in order, with its own ids, reward and advantage, whole groups kept whole where they fit
    assert _rows(g for chunk in chunks for g in chunk) == _rows(groups)
    for group in groups:
        if padded_tokens([group], shared_prompts) <= 30:
            assert any(any(g is group for g in chunk) for chunk in chunks)
    alone = micro_batches(advantage_groups(groups), 1, shared_prompts)
    assert all(sum(g.size for g in micro.groups) == 1 for micro in alone)  # nothing fits: a row a pass
    assert _rows(g for micro in alone for g in micro.groups) == _rows(groups)
    if shared_prompts:  # the prompts count once: fewer micro-batches than one row per completion needs
        assert len(chunks) < len(micro_batches(advantage_groups(groups), 30, shared_prompts=False))


def test_a_group_too_large_for_a_pass_is_split_only_with_its_advantages():
    group = make_group(np.random.default_rng(2), "big", [1.0, 0.0, 1.0, 0.0], prompt_length=4)
    with pytest.raises(ValueError, match="advantages"):
        micro_batches([[group]], 1)


def _rows(groups) -> list[tuple]:
    """Each completion of ``groups``: (group id, its ids, reward, advantage)."""
    rows = []
    for group in groups:
        ends = np.cumsum(group.completions.lengths)
        for c, end in enumerate(ends.tolist()):
            ids = group.completions.token_ids[end - int(group.completions.lengths[c]) : end]
            rows.append((group.group_id, tuple(ids.tolist()), float(group.rewards[c]), float(group.advantages[c])))
    return rows


def captured_gradients(max_tokens: int, lora: bool = False, model: LlamaForCausalLM | None = None,
                       **settings) -> list[torch.Tensor]:
    model = model or tiny_model()
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(1)  # the adapter's initialisation, whatever drew from the generator before
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():  # B starts at 0: give the adapter a say in the forward pass
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    config = TrainerConfig(max_tokens_per_microbatch=max_tokens, **settings)
    trainer = Trainer(model, "lora" if lora else "full", LossConfig(), config)
    grads = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: (grads.extend(p.grad.clone() for p in trainer.parameters), step())
    rng = np.random.default_rng(2)
    groups = [make_group(rng, "own", [1.0, 0.0, 0.0, 1.0]),
              make_group(rng, "peer", [0.0, 1.0, 1.0], off_policy=True),
              make_group(rng, "peer2", [1.0, 0.5, 0.0], off_policy=True, temperature=0.8)]
    trainer.step(groups)
    return grads


def test_micro_batching_does_not_change_the_gradient():
    whole, split = captured_gradients(10_000), captured_gradients(1)
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_does_not_change_the_gradient(lora):
    # It also turns off the shared prompts (transformers' checkpointed layers drop the KV cache): one row each.
    kept, recomputed = captured_gradients(10_000, lora), captured_gradients(10_000, lora, gradient_checkpointing=True)
    for a, b in zip(kept, recomputed, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("lora", [False, True])
def test_bfloat16_autocast_runs_the_decoders_products_in_bfloat16_and_keeps_the_logits_and_gradients_float32(lora):
    seen: dict[str, set[torch.dtype]] = {"decoder": set(), "output": set()}
    model = tiny_model()
    model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, out: seen["decoder"].add(out.dtype))
    model.lm_head.register_forward_hook(lambda m, i, out: seen["output"].add(out.dtype))
    exact = captured_gradients(10_000, lora)
    products = captured_gradients(10_000, lora, model, autocast="bfloat16")
    # (the float32 products seen: the one-off check of the model's head, outside the step)
    assert torch.bfloat16 in seen["decoder"] and seen["output"] == {torch.float32}
    assert all(g.dtype == torch.float32 for g in products)
    flat_exact, flat = torch.cat([g.flatten() for g in exact]), torch.cat([g.flatten() for g in products])
    assert not torch.equal(flat_exact, flat)  # the products did run in bfloat16...
    assert torch.nn.functional.cosine_similarity(flat_exact, flat, dim=0) > 0.99  # ...and the step is the same step


def test_a_step_trains_and_reports():
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    loss = LossConfig(divergence_threshold=1e9)  # only the advantage rule filters here
    trainer = Trainer(model, "full", loss, TrainerConfig(learning_rate=1e-3))
    rng = np.random.default_rng(3)
    groups = [make_group(rng, "own", [1.0, 0.0, 1.0, 0.0]),
              make_group(rng, "peer", [1.0, 0.0, 0.0, 0.0], off_policy=True),
              make_group(rng, "flat", [1.0, 1.0, 1.0], off_policy=True)]
    metrics = trainer.step(groups)
    assert metrics.trained and metrics.policy_version == 1 == trainer.policy_version
    assert metrics.groups == 2 and metrics.peer_groups == 1 and metrics.zero_variance_groups == 1
    assert metrics.sequences == 8
    assert metrics.tokens == int(groups[0].completions.lengths.sum() + groups[1].completions.lengths.sum())
    # ftis "or" drops the peer's non-positive-advantage completions: 3 of its 4, out of 8 sequences
    assert metrics.filtered_fraction == pytest.approx(3 / 8) == metrics.filtered_advantage_fraction
    assert 0 < metrics.is_weight_max <= LossConfig().clip_c
    assert metrics.grad_norm > 0 and np.isfinite(metrics.loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def with_sampler_logprobs(group: TrainingGroup, logprobs: list[list[float]]) -> TrainingGroup:
    flat = np.array([value for row in logprobs for value in row], dtype=np.float32)
    return dataclasses.replace(group, completions=dataclasses.replace(group.completions, sampler_logprobs=flat))


def test_the_step_measures_its_own_samples_against_the_trainer_apart_from_the_peers():
    model = tiny_model()
    rng = np.random.default_rng(5)
    own = make_group(rng, "own", [1.0, 0.0, 1.0, 0.0])
    exact = naive_logprobs(model, own)  # what the trainer computes for them before the step
    shifted = [[value + (0.5 if row == 1 else 0.0) for value in values] for row, values in enumerate(exact)]
    groups = [with_sampler_logprobs(own, shifted), make_group(rng, "peer", [1.0, 0.0, 0.0, 0.0], off_policy=True)]
    trainer = Trainer(model, "full", LossConfig(divergence_threshold=1e9), TrainerConfig(learning_rate=1e-3))
    step = trainer.step(groups, own_peer_id="me")
    tokens, shifted_tokens = sum(map(len, exact)), len(exact[1])
    assert step.own_logprob_gap == pytest.approx(0.5 * shifted_tokens / tokens, abs=1e-5)  # the peer's are not own
    assert step.own_ratio_outside == pytest.approx(shifted_tokens / tokens)  # e^0.5 = 1.65: outside [0.8, 1.25]
    assert step.own_filtered_fraction == 0  # the filter judges peers' samples only, unless filter_local
    unnamed = Trainer(tiny_model(), "full", LossConfig(divergence_threshold=1e9), TrainerConfig()).step(groups)
    assert unnamed.own_logprob_gap == 0 and unnamed.own_ratio_outside == 0  # no own id: nothing is counted as own


def test_with_filter_local_the_filters_drops_of_own_samples_are_counted_apart():
    model = tiny_model()
    rng = np.random.default_rng(6)
    own = dataclasses.replace(make_group(rng, "own", [1.0, 0.0, 1.0, 0.0]), off_policy=True)  # as filter_local makes it
    far = [[value - 5.0 for value in values] for values in naive_logprobs(model, own)]  # D far above g = 0.5
    trainer = Trainer(model, "full", LossConfig(divergence_threshold=0.5), TrainerConfig())
    step = trainer.step([with_sampler_logprobs(own, far)], own_peer_id="me")
    assert step.own_filtered_fraction == 1.0 and step.own_ratio_outside == 1.0
    assert not step.filtered_by_peer  # counted as its own, not as a peer's


def test_only_equal_rewards_means_no_step():
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, "full", LossConfig(), TrainerConfig())
    metrics = trainer.step([make_group(np.random.default_rng(4), "flat", [0.0, 0.0])])
    assert not metrics.trained and metrics.zero_variance_groups == 1 and trainer.policy_version == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_lora_step_changes_only_the_adapter():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = Trainer(model, "lora", LossConfig(), TrainerConfig())
    assert trainer.optimizer.param_groups[0]["lr"] == 1e-4
    # LoRA's B starts at zero, so the first step moves B only; a second step moves A too
    rng = np.random.default_rng(5)
    for _ in range(2):
        assert trainer.step([make_group(rng, "own", [1.0, 0.0, 1.0])]).trained
    changed = {name for name, p in model.named_parameters() if not torch.equal(before[name], p)}
    assert changed and all("lora_" in name for name in changed)
    assert any("lora_A" in name for name in changed) and any("lora_B" in name for name in changed)


def claiming(group: TrainingGroup, peer_id: str, logprob: float) -> TrainingGroup:
    """``group`` as ``peer_id`` sent it, claiming ``logprob`` for every sampled token."""
    columns = dataclasses.replace(group.completions,
                                  sampler_logprobs=np.full_like(group.completions.sampler_logprobs, logprob))
    return dataclasses.replace(group, peer_id=peer_id, completions=columns)


def test_an_absurd_sampler_logprob_under_vis_leaves_every_weight_finite():
    # The wire's lowest log-prob on a peer's tokens: under vis the ratio π_θ / π_gen is e^32000, unbounded by
    # the PPO clip wherever Â < 0; the surrogate caps it (loss/terms.py), so the step is taken and finite.
    model = tiny_model()
    trainer = Trainer(model, "full", LossConfig(variant="vis"), TrainerConfig(learning_rate=1e-3))
    rng = np.random.default_rng(5)
    groups = [make_group(rng, "own", [1.0, 0.0, 1.0, 0.0]),
              claiming(make_group(rng, "peer", [0.0, 1.0, 0.0, 0.0], off_policy=True), "mallory", MIN_LOGPROB)]
    metrics = trainer.step(groups)
    assert metrics.trained and not metrics.refused and np.isfinite(metrics.loss) and np.isfinite(metrics.grad_norm)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_step_that_is_not_finite_is_refused_and_its_culprit_named():
    # With C = ∞ (no truncation, a setting the node accepts) the TIS weight exp(old - sampler) of a claim of
    # the wire's lowest log-prob overflows: the loss is not finite. Nothing may change but a counter.
    model = tiny_model()
    loss = LossConfig(variant="tis", clip_c=float("inf"))
    trainer = Trainer(model, "full", loss, TrainerConfig(learning_rate=1e-3))
    rng = np.random.default_rng(6)
    own = make_group(rng, "own", [1.0, 0.0, 1.0, 0.0])
    bob = claiming(make_group(rng, "bob", [0.0, 1.0, 1.0, 0.0], off_policy=True), "bob", -1.0)
    mallory = claiming(make_group(rng, "mallory", [0.0, 1.0, 0.0, 0.0], off_policy=True), "mallory", MIN_LOGPROB)
    assert trainer.step([own, bob]).trained  # the optimizer has moments to keep
    weights = [p.detach().clone() for p in model.parameters()]
    moments = copy.deepcopy(trainer.optimizer.state_dict())
    metrics = trainer.step([own, bob, mallory])
    assert metrics.refused and not metrics.trained and metrics.nonfinite_peers == ["mallory"]
    assert trainer.policy_version == metrics.policy_version == 1
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    after = trainer.optimizer.state_dict()["state"]
    for index, state in moments["state"].items():
        assert all(torch.equal(state[key], after[index][key]) for key in state)
    assert all(p.grad is None for p in model.parameters())  # nothing left over for the next step
    again = trainer.step([own, bob])  # the node goes on
    assert again.trained and again.policy_version == 2
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_step_that_raises_on_a_peers_groups_is_refused_and_names_the_peer():
    # An id this model has no embedding for (the intake refuses such groups: this is the trainer's own last line).
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, "full", LossConfig(), TrainerConfig())
    rng = np.random.default_rng(6)
    own = make_group(rng, "own", [1.0, 0.0])
    bad = make_group(rng, "bad", [1.0, 0.0], off_policy=True)
    columns = dataclasses.replace(bad.completions, token_ids=bad.completions.token_ids + VOCAB)
    bad = dataclasses.replace(bad, peer_id="mallory", completions=columns)
    figures = trainer.step([own, bad])
    assert figures.refused and not figures.trained and figures.nonfinite_peers == ["mallory"]
    assert trainer.policy_version == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert trainer.step([own]).trained  # and the next step goes on
    with pytest.raises(IndexError):  # the node's own groups raising is a defect of its own: not hidden
        trainer.step([dataclasses.replace(own, completions=columns)])
