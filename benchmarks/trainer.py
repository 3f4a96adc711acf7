"""One F-TIS optimizer step against a plain GRPO step, on the same model and the same batch.

Run (from the repo root):  python -m benchmarks.trainer [--cases small,medium,...] [--pairs N] [--threads N]
    [--max-new-tokens N] [--prompts N] [--larger] [--quick]
--cases: some of the demo's nodes by name (default all four below; --larger adds tiny-large); --pairs:
timed repetitions of each variant (default 30); --threads: torch threads (default 1, the demo's per node);
--max-new-tokens: completion length cap (default the demo's, 6); --prompts: own groups per step (default the demo's
16; each peer sends as many, up to 16); --quick: tiny-small only, 3 pairs, 4 groups. ``--cases qwen2-stand-in``: the
Qwen2 stand-in on the real 151,936-token vocabulary (``demo_nodes.py``; its peers are stand-ins too).

Real-model mode, the step's memory (not the ratio):  python -m benchmarks.trainer --model [FOLDER|NAME]
    [--adapter lora] [--microbatch 1024,8192] [--trainer gradient_checkpointing=true] [--threads 2]
--model alone: SmolLM2-135M-Instruct as ``ftis-node models fetch --all`` writes it; a name of ``ftis.node.models.real``
(``gemma-3-270m``) or any model folder. 4 prompts of the arithmetic task, each after solved examples up to
~300 tokens (in the chat template where the tokenizer has one), G = 8 completions each sampled by the model itself
(T = 1, ≤ 128 new tokens), rewards drawn 0/1 as below; then one F-TIS ``Trainer.step`` per trainer setting
(``--microbatch`` values × each ``--trainer key=json``), each in a fresh process so that peaks do not mix:
its peak RSS (the kernel's high-water mark, reset just before the step), seconds, micro-batches and the tokens
their forward passes compute. On CPU, glibc keeps much of what a step frees for the next allocation, which the
peak counts; ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment shows the step without that (docs/benchmarks.md).

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
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
    padded_tokens: int  # what the forward passes compute (``packing.padded_tokens``)
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
    from ftis.node.trainer.groups import advantage_groups
    from ftis.node.trainer.logprobs import completion_logprobs
    from ftis.node.trainer.loss_params import loss_params
    from ftis.node.trainer.packing import micro_batches, pack, padded_tokens
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
    micros = micro_batches(advantage_groups(groups), config.trainer.max_tokens_per_microbatch)
    chunks = [pack(micro.groups, pad_id) for micro in micros]
    params = loss_params(config.loss, step=version)
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
        padded_tokens=sum(padded_tokens(micro.groups) for micro in micros),
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


REAL_MODEL = "smollm2-135m-instruct"  # a name of ftis.node.models.catalog: ftis-node models fetch writes it
REAL_PROMPTS, REAL_GROUP_SIZE, REAL_MAX_NEW_TOKENS = 4, 8, 128
FEW_SHOT_TOKENS = 300  # a real node's prompts with solved examples are 200-500 tokens
INSTRUCTION = "Compute each result. Write the working in one line, then the answer."


def few_shot_prompts(tokenizer, count: int, target_tokens: int = FEW_SHOT_TOKENS) -> list[np.ndarray]:
    """``count`` prompts of the arithmetic task, each its question after solved examples (different ones per
    prompt) up to about ``target_tokens`` tokens, in the tokenizer's chat template where it has one."""
    from ftis.node.tasks import make_task
    from ftis.node.tasks.prompts import prompt_ids, uses_chat_template

    task, chat = make_task("arithmetic"), uses_chat_template(tokenizer, "auto")
    prompts = []
    for k in range(count):
        question = task.problem("train", 10_000 + k)
        examples: list[str] = []
        while True:
            example = task.problem("train", 100 * k + len(examples))
            text = "\n\n".join([INSTRUCTION, *examples, task.prompt(question)])
            ids = prompt_ids(tokenizer, text, chat=chat)
            if len(ids) >= target_tokens:
                break
            shown = task.prompt(example)
            examples.append(f"{shown}\n{shown[:-1]} = {task.solved(example)}. Answer: {task.solved(example)}")
        prompts.append(ids)
    return prompts


def real_groups(folder: str, adapter: str, prompts: int, max_new_tokens: int, threads: int) -> list:
    """(In a fresh process.) ``prompts`` few-shot groups of G completions sampled by the model itself."""
    import torch

    from ftis.node.config import NodeConfig
    from ftis.node.models import load_policy

    torch.set_num_threads(threads)
    policy = load_policy(folder, adapter=adapter)
    config = NodeConfig.model_validate({"generation": {"group_size": REAL_GROUP_SIZE, "max_new_tokens": max_new_tokens,
                                                       "batch_size": prompts * REAL_GROUP_SIZE}})
    return sampled_groups(policy, config, few_shot_prompts(policy.tokenizer, prompts), peer_id="me",
                          off_policy=False, seed=0, rng=np.random.default_rng(0))


def real_step(folder: str, adapter: str, groups: list, trainer: dict, threads: int) -> dict:
    """(In a fresh process.) One F-TIS ``Trainer.step`` on ``groups``: its peak RSS (the kernel's high-water mark,
    reset just before the step), the process's peak since it started, seconds, and the step's figures."""
    import resource

    import psutil
    import torch

    from ftis.node.config import LossConfig, ModelConfig, TrainerConfig
    from ftis.node.models import load_policy
    from ftis.node.trainer.trainer import Trainer

    torch.set_num_threads(threads)
    lora = ModelConfig()  # the node's default adapter: r 128, alpha 256
    policy = load_policy(folder, adapter=adapter, lora_rank=lora.lora_rank, lora_alpha=lora.lora_alpha)
    config = TrainerConfig(**trainer)
    step = Trainer(policy.model, policy.adapter, LossConfig(), config, pad_id=policy.tokenizer.pad_token_id or 0)
    micro, computed = step_work(policy.model, groups, config)
    before = psutil.Process().memory_info().rss
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak RSS, to the current RSS
    started = time.perf_counter()
    metrics = step.step(groups)
    seconds = time.perf_counter() - started
    status = Path("/proc/self/status").read_text()
    peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
    return {"before": before, "peak": peak, "process_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "seconds": seconds, "trained": metrics.trained, "tokens": metrics.tokens, "microbatches": micro,
            "computed": computed,
            "parameters": sum(p.numel() for p in policy.trainable_parameters())}


def step_work(model, groups: list, config) -> tuple[int, int]:
    """(micro-batches, tokens the forward passes compute) of a step on ``groups`` under the trainer settings
    ``config``: each micro-batch padded as packed, each distinct prompt once and the tokens they share once, where
    the trainer shares prompts."""
    from ftis.node.trainer.groups import advantage_groups
    from ftis.node.trainer.logprobs import shares_prompts
    from ftis.node.trainer.packing import micro_batches, padded_tokens

    shared = shares_prompts(model) and not config.gradient_checkpointing  # as the trainer decides
    micro = micro_batches(advantage_groups(groups), config.max_tokens_per_microbatch, shared)
    return len(micro), sum(padded_tokens(m.groups, shared) for m in micro)


def in_fresh_process(function: Callable, *args):
    """``function(*args)`` in a new interpreter (spawned), so that its peak memory is its own."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def real_model_mode(args: argparse.Namespace) -> None:
    """One F-TIS step of a real model on a few-shot batch, one fresh process per trainer setting (``--model``)."""
    from benchmarks.demo_nodes import load_average
    from ftis.node.models.loading import REAL_MODELS
    from ftis.node.models.real import real_model_folder

    try:
        folder = real_model_folder(args.model) if args.model in REAL_MODELS else Path(args.model).expanduser()
    except FileNotFoundError as missing:
        raise SystemExit(f"{missing}; or pass --model FOLDER") from missing
    if not (folder / "config.json").is_file():
        raise SystemExit(f"no model folder at {folder}: pass --model FOLDER, or a name of {', '.join(REAL_MODELS)}")
    settings = [{"max_tokens_per_microbatch": int(tokens)} for tokens in args.microbatch.split(",")]
    for extra in filter(None, args.trainer.split(",")):
        key, value = extra.split("=")
        settings = [*settings, *({**s, key: json.loads(value)} for s in settings)]
    started = time.perf_counter()
    groups = in_fresh_process(real_groups, str(folder), args.adapter, args.prompts or REAL_PROMPTS,
                              args.max_new_tokens or REAL_MAX_NEW_TOKENS, args.threads)
    lengths = np.concatenate([group.completions.lengths for group in groups])
    print(f"{folder.name} {args.adapter}: {len(groups)} groups × {REAL_GROUP_SIZE}, prompts "
          f"{'/'.join(str(len(g.prompt_ids)) for g in groups)} tokens, completions {lengths.sum()} tokens "
          f"(mean {lengths.mean():.1f}, max {lengths.max()}), sampled in {time.perf_counter() - started:.0f} s; "
          f"{args.threads} thread(s), load average {load_average()}", flush=True)
    gib = 1024 ** 3
    rows = [("trainer settings", "RSS before", "step peak RSS", "process peak", "step s", "µb", "tokens computed")]
    for trainer in settings:
        r = in_fresh_process(real_step, str(folder), args.adapter, groups, trainer, args.threads)
        assert r["trained"] and r["tokens"] == lengths.sum()
        rows.append((" ".join(f"{k}={v}" for k, v in trainer.items()), f"{r['before'] / gib:.2f} GiB",
                     f"{r['peak'] / gib:.2f} GiB", f"{r['process_peak'] / gib:.2f} GiB", f"{r['seconds']:.1f}",
                     str(r["microbatches"]), f"{r['computed']:,}"))
        print(" | ".join(rows[-1]), f"({r['parameters']:,} trainable; load {load_average()})", flush=True)
    from benchmarks.swarm_common import print_table

    print_table(rows)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.demo_nodes import (
        add_case_arguments,
        chosen_cases,
        load_average,
        stand_in_peers,
        torch_threads_kept,
    )
    from ftis.node.config import TrainerConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30, help="timed repetitions of each variant (default 30)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="completion length cap (default: the demo's)")
    parser.add_argument("--prompts", type=int, default=0, help="own groups per step (default: the demo's 16)")
    add_case_arguments(parser, quick="tiny-small only, 3 pairs, 4 groups each")
    parser.add_argument("--model", nargs="?", const=REAL_MODEL, default=None,
                        help=f"a real model's folder or name (alone: {REAL_MODEL}): its step's peak memory")
    parser.add_argument("--adapter", choices=("full", "lora"), default="full", help="with --model")
    parser.add_argument("--microbatch", default=str(TrainerConfig().max_tokens_per_microbatch),
                        help="with --model: max_tokens_per_microbatch, comma-separated (default: the node's)")
    parser.add_argument("--trainer", default="", help="with --model: more [trainer] settings to try, key=json, "
                        "comma-separated (each doubles the runs)")
    args = parser.parse_args(argv)
    if args.model:
        return real_model_mode(args)
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
