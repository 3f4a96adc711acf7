"""One F-TIS optimizer step against a plain GRPO step, on the same model and the same batch.

Run (from the repo root):  python -m benchmarks.trainer [--cases small,medium,...] [--pairs N] [--threads N]
    [--max-new-tokens N] [--prompts N] [--larger] [--quick]
--cases: some of the demo's nodes by name (default all four below; --larger adds tiny-large); --pairs:
timed repetitions of each variant (default 30); --threads: torch threads (default 1, the demo's per node);
--max-new-tokens: completion length cap (default the demo's, 6); --prompts: own groups per step (default the demo's
16; each peer sends as many, up to 16); --quick: tiny-small only, 3 pairs, 4 groups. ``--cases qwen2-stand-in``: the
Qwen2 stand-in on the real 151,936-token vocabulary (``demo_nodes.py``; its peers are stand-ins too).

Method:
1. Models (``demo_nodes.py``): the demo's nodes as its packaged settings make them — tiny-small full,
   tiny-medium full, tiny-small LoRA (r 8, α 16) — plus tiny-medium LoRA (same adapter settings) and, with
   ``--larger``, tiny-large full; random weights, float32, CPU.
2. Batch: the demo's step. 16 own groups of G = 8 completions of the demo's arithmetic prompts, sampled by
   the model itself through the transformers backend (on-policy), plus ``max_peer_groups`` = 32 peer groups
   (16 each from two other tiny models, other prompts; off-policy, so the filter applies to them), every
   completion with its real sampler log-probs. Rewards are drawn (0/1, seeded) with both values in every
   group, so every group is informative (the step drops zero-variance groups before any forward pass,
   whatever the variant). One batch per case, the same for both variants.
3. Variants, both through the node's own ``Trainer.step`` (``node/trainer/trainer.py``): ``ftis`` (PPO
   ratio to π_θold, weight min(π_θold / π_gen, C) detached, the filter) and ``nois``, plain GRPO (ratio
   to π_θold, PPO clip, w = 1, no filter). Old log-probs: the node takes one optimizer step per round, so
   π_θold is the model of the step's own forward pass and ``old_logprobs`` are its log-probs detached, for
   both variants; neither recomputes them. (A GRPO trainer taking several steps per batch needs one extra
   no-grad forward pass for π_θold; it would pay it under either loss alike.) The k3 divergence D_i is
   computed by every variant (``loss/variants.py``'s ``_prepare``) for the metrics, so ``nois`` pays that
   too; what ``ftis`` adds is the weight and the filter.
4. Timing: before every repetition (outside the timed region) the weights and the AdamW state are restored
   from a snapshot taken after one untimed step (so AdamW's moments exist, as in a running node), so every
   repetition does identical work, which the script checks (every repetition of a variant gives the same
   loss and gradient norm, bit for bit); the garbage collector is off while timing (as ``timeit`` does).
   Repetitions interleave ABBA ABBA… (``ftis nois nois ftis``…), so a slow drift of the machine's speed
   falls on both alike.
   Figures: the median of each variant and their ratio, the spread (25th–75th percentile) of the
   per-pair ratios, and the ratio of the fastest repetitions (least disturbed by other load, as
   ``timeit`` advises). Beside the step: the forward pass + loss without backward, timed the same way;
   and the part of the step that differs between the variants, the loss and its backward pass down to
   the log-probs (on log-probs computed once), with ``LOSS_REPEATS`` times as many repetitions: cheap, so
   precise even on a loaded machine. Its difference over the plain step is the overhead F-TIS adds.
Goal: an F-TIS step ≤ 1.05 × a plain GRPO step.
"""

import argparse
import copy
import dataclasses
import gc
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

VARIANTS = ("ftis", "nois")
OWN_PROMPTS_FROM, PEER_PROMPTS_FROM = 0, 10_000  # problem indices: peers answer other problems
PEER_MODELS = (("tiny-small", 11), ("tiny-medium", 12))  # (name, seed): the two peers' models
GOAL_RATIO = 1.05
LOSS_REPEATS = 10  # the loss alone is cheap: this many times the step's repetitions


@dataclass
class Timings:
    """Seconds per repetition, per variant, in the order they ran."""

    seconds: dict[str, list[float]]

    def median(self, variant: str) -> float:
        return statistics.median(self.seconds[variant])

    def ratio(self) -> float:
        return self.median("ftis") / self.median("nois")

    def fastest_ratio(self) -> float:
        return min(self.seconds["ftis"]) / min(self.seconds["nois"])

    def pair_ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.seconds["ftis"], self.seconds["nois"], strict=True)]


@dataclass
class CaseResult:
    label: str
    parameters: int  # trainable
    sequences: int
    tokens: int  # completion tokens trained on
    padded_tokens: int  # prompt + completion, padded: what the forward pass costs
    microbatches: int
    step: Timings
    forward_loss: Timings
    loss: Timings
    identical: bool  # every repetition of a variant gave the same loss and gradient norm
    filtered: float  # ftis's filtered fraction on this batch


def interleaved(run: Callable[[str], None], before: Callable[[], None], pairs: int) -> Timings:
    """``run(variant)`` for both variants, ``pairs`` times each, ABBA-interleaved; ``before()`` untimed."""
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    gc.disable()  # as timeit does: a collection would land on whichever repetition triggers it
    try:
        for pair in range(pairs):
            for variant in VARIANTS if pair % 2 == 0 else VARIANTS[::-1]:
                before()
                started = time.perf_counter()
                run(variant)
                seconds[variant].append(time.perf_counter() - started)
    finally:
        gc.enable()
    return Timings(seconds)


def informative_rewards(rng: np.random.Generator, size: int) -> np.ndarray:
    """0/1 rewards with both values present (``size`` ≥ 2)."""
    rewards = rng.integers(0, 2, size).astype(np.float64)
    if np.ptp(rewards) == 0:
        rewards[-1] = 1.0 - rewards[-1]
    return rewards


def sampled_groups(policy, config, prompts: list[np.ndarray], *, peer_id: str, off_policy: bool, seed: int,
                   rng: np.random.Generator) -> list:
    """``TrainingGroup``s of G completions per prompt sampled by ``policy`` with the node's backend."""
    from ftis.node.generation import make_generator
    from ftis.node.trainer.groups import TrainingGroup
    from ftis.protocol import SamplingSettings
    from ftis.protocol.schema import CompletionColumns

    generation = config.generation
    sampling = SamplingSettings(generation.temperature, generation.top_p, generation.top_k, generation.max_new_tokens)
    generator = make_generator("transformers", policy, generation)
    groups = []
    for k, (prompt, completions) in enumerate(zip(prompts, generator.generate(
            prompts, generation.group_size, sampling, seed=seed), strict=True)):
        columns = CompletionColumns(
            token_ids=np.concatenate([c.token_ids for c in completions]),
            sampler_logprobs=np.concatenate([c.sampler_logprobs for c in completions]),
            lengths=np.array([c.num_tokens for c in completions], dtype=np.int64),
            rewards=np.zeros(len(completions)),
            finish_reasons=tuple(c.finish_reason for c in completions),
        )
        groups.append(TrainingGroup(f"{peer_id}/{k}", peer_id, prompt, columns,
                                    informative_rewards(rng, len(completions)), off_policy, sampling.temperature))
    return groups


def demo_batch(config, policy, peer_models: list, groups_per_peer: int) -> list:
    """The node's own groups plus ``groups_per_peer`` from each peer model (see the module docstring)."""
    from benchmarks.demo_nodes import demo_prompts

    tokenizer, rng = policy.tokenizer, np.random.default_rng(0)
    own = demo_prompts(config, tokenizer, config.generation.prompts_per_round, OWN_PROMPTS_FROM)
    groups = sampled_groups(policy, config, own, peer_id="me", off_policy=False, seed=0, rng=rng)
    for p, model in enumerate(peer_models):
        prompts = demo_prompts(config, tokenizer, groups_per_peer, PEER_PROMPTS_FROM + p * groups_per_peer)
        peer = dataclasses.replace(policy, model=model)  # the same tokenizer, another model's weights
        groups += sampled_groups(peer, config, prompts, peer_id=f"peer{p}", off_policy=True, seed=p + 1, rng=rng)
    return groups


def measure_case(case, peer_models: list, pairs: int, groups_per_peer: int) -> CaseResult:
    import torch

    from benchmarks.demo_nodes import load_case
    from ftis.node.loss import LossInputs, compute_loss
    from ftis.node.trainer.logprobs import completion_logprobs
    from ftis.node.trainer.packing import micro_batches, pack
    from ftis.node.trainer.trainer import Trainer

    config = case.config
    policy = load_case(config)
    groups = demo_batch(config, policy, peer_models, groups_per_peer)
    model, pad_id = policy.model, policy.tokenizer.pad_token_id or 0
    losses = {variant: config.loss.model_copy(update={"variant": variant}) for variant in VARIANTS}
    trainers = {variant: Trainer(model, policy.adapter, losses[variant], config.trainer, pad_id=pad_id)
                for variant in VARIANTS}
    trainers["ftis"].step(groups)  # untimed: AdamW's moments exist from here on, as in a running node
    weights = copy.deepcopy(model.state_dict())
    optimizer = copy.deepcopy(trainers["ftis"].optimizer.state_dict())
    version = trainers["ftis"].policy_version

    def restore() -> None:
        model.load_state_dict(weights)
        for trainer in trainers.values():
            trainer.optimizer.load_state_dict(optimizer)
            trainer.policy_version = version

    outcomes: dict[str, set[tuple[float, float]]] = {variant: set() for variant in VARIANTS}
    filtered: list[float] = []

    def step(variant: str) -> None:
        metrics = trainers[variant].step(groups)
        outcomes[variant].add((metrics.loss, metrics.grad_norm))
        if variant == "ftis":
            filtered.append(metrics.filtered_fraction)

    step_times = interleaved(step, restore, pairs)
    restore()

    # The step's forward pass and loss, as Trainer.step builds them, without the backward pass.
    chunks = [pack(micro.groups, pad_id) for micro in micro_batches(groups, config.trainer.max_tokens_per_microbatch)]
    params = config.loss.params(step=version)
    model.train()

    def inputs(packed, logprobs) -> LossInputs:
        return LossInputs(logprobs=logprobs, old_logprobs=logprobs.detach(), sampler_logprobs=packed.sampler_logprobs,
                          loss_mask=packed.loss_mask, rewards=packed.rewards, group_ids=packed.group_index,
                          off_policy=packed.off_policy)

    def forward_loss(variant: str) -> None:
        for packed in chunks:
            compute_loss(variant, inputs(packed, completion_logprobs(model, packed)), params)

    forward_times = interleaved(forward_loss, lambda: None, pairs)
    with torch.no_grad():
        computed = [completion_logprobs(model, packed) for packed in chunks]

    def loss_alone(variant: str) -> None:  # and its backward pass down to the log-probs
        for packed, logprobs in zip(chunks, computed, strict=True):
            compute_loss(variant, inputs(packed, logprobs.clone().requires_grad_()), params).loss.backward()

    loss_times = interleaved(loss_alone, lambda: None, pairs * LOSS_REPEATS)
    model.eval()
    return CaseResult(
        label=case.label,
        parameters=sum(p.numel() for p in policy.trainable_parameters()),
        sequences=sum(group.size for group in groups),
        tokens=int(sum(int(packed.loss_mask.sum()) for packed in chunks)),
        padded_tokens=sum(int(packed.input_ids.numel()) for packed in chunks),
        microbatches=len(chunks),
        step=step_times,
        forward_loss=forward_times,
        loss=loss_times,
        identical=all(len(seen) == 1 for seen in outcomes.values()),
        filtered=statistics.median(filtered),
    )


def print_results(results: list[CaseResult]) -> None:
    from benchmarks.swarm_common import percentile, print_table

    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.1f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"

    def spread(t: Timings) -> str:
        ratios = t.pair_ratios()
        return f"{percentile(ratios, 25):.3f}–{percentile(ratios, 75):.3f}"

    rows = [("model", "trainable", "batch", "step ftis", "step nois", "ratio", "pair ratios p25–p75", "fastest",
             "fwd+loss ftis", "nois", "ratio", "loss+bwd ftis", "nois", "ratio", "identical")]
    for r in results:
        rows.append((
            r.label, f"{r.parameters:,}",
            f"{r.sequences} seq, {r.tokens} tok ({r.padded_tokens} padded, {r.microbatches} µb)",
            ms(r.step.median("ftis")), ms(r.step.median("nois")), f"{r.step.ratio():.3f}", spread(r.step),
            f"{r.step.fastest_ratio():.3f}",
            ms(r.forward_loss.median("ftis")), ms(r.forward_loss.median("nois")), f"{r.forward_loss.ratio():.3f}",
            ms(r.loss.median("ftis")), ms(r.loss.median("nois")), f"{r.loss.ratio():.3f}",
            "yes" if r.identical else "NO",
        ))  # fmt: skip
    print_table(rows)


def summary(r: CaseResult) -> str:
    verdict = "met" if r.step.ratio() <= GOAL_RATIO else f"MISSED by {r.step.ratio() / GOAL_RATIO - 1:.1%}"
    added = r.loss.median("ftis") - r.loss.median("nois")
    return (f"{r.label}: ftis step {r.step.ratio():.3f}× nois (median; goal ≤ {GOAL_RATIO}×: {verdict}), fastest "
            f"{r.step.fastest_ratio():.3f}×; the part that differs (loss + its backward) adds {added * 1e3:+.2f} ms "
            f"= {added / r.step.median('nois'):+.2%} of a nois step; ftis filtered {r.filtered:.0%} of the completions")


def main(argv: list[str] | None = None) -> None:
    from benchmarks.demo_nodes import (
        add_case_arguments,
        chosen_cases,
        load_average,
        stand_in_peers,
        torch_threads_kept,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30, help="timed repetitions of each variant (default 30)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="completion length cap (default: the demo's)")
    parser.add_argument("--prompts", type=int, default=0, help="own groups per step (default: the demo's 16)")
    add_case_arguments(parser, quick="tiny-small only, 3 pairs, 4 groups each")
    args = parser.parse_args(argv)
    import torch

    from ftis.node.models.tiny import build_tiny_model

    cases = chosen_cases(args)
    pairs = 3 if args.quick else args.pairs
    overrides: dict[str, int] = {"max_new_tokens": args.max_new_tokens} if args.max_new_tokens else {}
    if args.quick or args.prompts:
        overrides["prompts_per_round"] = args.prompts or 4
    cases = [case.with_generation(**overrides) for case in cases]
    groups_per_peer = min(cases[0].config.generation.prompts_per_round, cases[0].config.mix.max_peer_groups // 2)
    results = []
    with torch_threads_kept():
        torch.set_num_threads(args.threads)
        peer_models = [build_tiny_model(name, seed=seed) for name, seed in PEER_MODELS]
        generation = cases[0].config.generation
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs, load average "
              f"{load_average()} at start; batch: {generation.prompts_per_round} own groups + {groups_per_peer} "
              f"from each of {len(peer_models)} peers, G = {generation.group_size}, ≤ {generation.max_new_tokens} new "
              f"tokens; {pairs} repetitions of each variant, interleaved")
        for case in cases:
            peers = stand_in_peers(case, tuple(seed for _, seed in PEER_MODELS)) or peer_models
            results.append(measure_case(case, peers, pairs, groups_per_peer))
            print(summary(results[-1]), flush=True)
    print_results(results)
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
