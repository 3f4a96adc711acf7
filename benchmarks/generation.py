"""Generation speed of the transformers backend on CPU, against the same model's ``model.generate``.

Run (from the repo root):  python -m benchmarks.generation [--cases small,medium,...] [--threads 1,all]
    [--max-new-tokens 6,64] [--repeats N] [--larger] [--quick]
--cases: some of the demo's nodes by name (default all four below; --larger adds tiny-large); --threads:
torch thread counts, one after another (default 1 and all CPUs); --max-new-tokens: completion length caps
(default the demo's 6, and 64); --repeats: timed calls of each method (default 7); --quick: tiny-small
only, 1 thread, 6 tokens, 2 prompts, 2 calls each. GPU figures come from ``benchmarks/gpu_check.py``.

Method:
1. Models (``demo_nodes.py``): tiny-small full, tiny-medium full, tiny-small LoRA (r 8, α 16) as the demo's
   settings make them, plus tiny-medium LoRA and, with ``--larger``, tiny-large full; random weights,
   float32, CPU.
2. Work: one round's generation as the demo's node does it: ``prompts_per_round`` (16) arithmetic prompts
   × G = ``group_size`` (8) completions, in chunks of ``batch_size`` (64) sequences, at the demo's sampling
   settings (T = 1, no top-k or top-p), up to ``max_new_tokens``.
3. Backend: ``TransformersGenerator.generate`` (``node/generation/hf.py``): its own loop with a KV cache,
   recording every sampled token's log-prob under the processed distribution. Raw: the same model's
   ``model.generate`` (sampling, same T, top-k 0, top-p 1, same end-of-sequence and padding ids, same
   KV cache class) on the same left-padded chunks, which keeps no log-probs. The ratio backend / raw says
   what the backend's bookkeeping and loop cost against transformers' own.
4. Tokens: completion tokens kept, up to and including the end-of-sequence token, as the node counts
   them (``generation_tokens_per_s``). Each method runs with a fixed seed, so every call produces the
   same tokens; tokens/s is those tokens over the median call. Calls interleave backend, raw, raw,
   backend…; one untimed call of each first.
"""

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

METHODS = ("backend", "raw")
DEFAULT_MAX_NEW_TOKENS = "6,64"


@dataclass
class GenerationResult:
    label: str
    threads: int
    max_new_tokens: int
    sequences: int
    tokens: dict[str, int]  # per call, per method
    seconds: dict[str, list[float]]

    def tokens_per_s(self, method: str) -> float:
        return self.tokens[method] / statistics.median(self.seconds[method])

    def ratio(self) -> float:
        return self.tokens_per_s("backend") / self.tokens_per_s("raw")


def raw_generate(model, rows: list[np.ndarray], *, batch_size: int, max_new_tokens: int, temperature: float,
                 eos_token_id: int, pad_token_id: int, seed: int) -> int:
    """``model.generate`` over ``rows`` in chunks of ``batch_size``, left-padded as the backend pads them;
    returns the completion tokens kept (up to and including the first end-of-sequence token)."""
    import torch

    torch.manual_seed(seed)
    tokens = 0
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            ids, mask = left_padded(rows[start : start + batch_size], pad_token_id)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature,
                                 top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                 pad_token_id=pad_token_id)
            tokens += kept_tokens(out[:, ids.shape[1] :].numpy(), eos_token_id)
    return tokens


def left_padded(prompts: list[np.ndarray], pad_token_id: int):
    """(ids, attention mask), both (B, P) int64 tensors, padding on the left (as the backend pads)."""
    import torch

    from ftis.node.trainer.packing import left_padded as padded

    ids, mask = padded(prompts, pad_token_id)
    return torch.from_numpy(ids), torch.from_numpy(mask)


def kept_tokens(generated: np.ndarray, eos_token_id: int) -> int:
    """(B, n) generated ids -> tokens up to and including each row's first end-of-sequence id (all n if none)."""
    stops = generated == eos_token_id
    first = np.where(stops.any(axis=1), stops.argmax(axis=1) + 1, generated.shape[1])
    return int(first.sum())


def interleaved(calls: dict[str, Callable[[], int]], repeats: int) -> tuple[dict[str, int], dict[str, list[float]]]:
    """Each call once untimed, then ``repeats`` timed calls each, ABBA-interleaved; tokens per call must not vary."""
    tokens = {method: call() for method, call in calls.items()}
    seconds: dict[str, list[float]] = {method: [] for method in calls}
    for repeat in range(repeats):
        for method in METHODS if repeat % 2 == 0 else METHODS[::-1]:
            started = time.perf_counter()
            produced = calls[method]()
            seconds[method].append(time.perf_counter() - started)
            if produced != tokens[method]:
                raise RuntimeError(f"{method}: {tokens[method]} tokens, then {produced}: the seed must fix the work")
    return tokens, seconds


def measure(case, threads: int, max_new_tokens: int, repeats: int) -> GenerationResult:
    import torch

    from benchmarks.demo_nodes import demo_prompts, load_case
    from ftis.node.generation import make_generator
    from ftis.protocol import SamplingSettings

    torch.set_num_threads(threads)
    config, generation = case.config, case.config.generation
    policy = load_case(config)
    eos, pad = policy.tokenizer.eos_token_id, policy.tokenizer.pad_token_id
    prompts = demo_prompts(config, policy.tokenizer, generation.prompts_per_round)
    G = generation.group_size
    sampling = SamplingSettings(generation.temperature, generation.top_p, generation.top_k, max_new_tokens)
    if generation.top_p < 1.0 or generation.top_k:
        raise ValueError("the raw comparison samples without top-k or top-p; the case's settings use them")
    backend = make_generator("transformers", policy, generation)
    rows = [prompt for prompt in prompts for _ in range(G)]  # prompt-major, as the backend orders them

    def with_backend() -> int:
        groups = backend.generate(prompts, G, sampling, seed=0)
        return sum(completion.num_tokens for group in groups for completion in group)

    def with_generate() -> int:
        return raw_generate(policy.model, rows, batch_size=generation.batch_size, max_new_tokens=max_new_tokens,
                            temperature=generation.temperature, eos_token_id=eos, pad_token_id=pad, seed=0)

    tokens, seconds = interleaved({"backend": with_backend, "raw": with_generate}, repeats)
    return GenerationResult(case.label, threads, max_new_tokens, len(rows), tokens, seconds)


def print_results(results: list[GenerationResult]) -> None:
    from benchmarks.swarm_common import print_table

    rows = [("model", "threads", "max new", "sequences", "backend tok/s", "tokens", "raw generate tok/s", "tokens",
             "backend / raw")]
    for r in results:
        rows.append((r.label, str(r.threads), str(r.max_new_tokens), str(r.sequences),
                     f"{r.tokens_per_s('backend'):,.0f}", str(r.tokens["backend"]),
                     f"{r.tokens_per_s('raw'):,.0f}", str(r.tokens["raw"]), f"{r.ratio():.2f}"))
    print_table(rows)
    print("tokens/s: completion tokens kept (end-of-sequence included) over the median call; 'backend / raw' > 1: "
          "the backend is faster than model.generate")


def main(argv: list[str] | None = None) -> None:
    from benchmarks.demo_nodes import add_case_arguments, chosen_cases, load_average, torch_threads_kept

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,all", help="torch thread counts, comma-separated; 'all' = every CPU")
    parser.add_argument("--max-new-tokens", default=DEFAULT_MAX_NEW_TOKENS, help="length caps, comma-separated")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls of each method (default 7)")
    add_case_arguments(parser, quick="tiny-small, 1 thread, 6 tokens, 2 prompts, 2 calls")
    args = parser.parse_args(argv)
    import torch
    import transformers


    cases = chosen_cases(args)
    threads = [1] if args.quick else [(os.cpu_count() or 1) if t.strip() == "all" else int(t)
                                      for t in args.threads.split(",")]
    lengths = [6] if args.quick else [int(n) for n in args.max_new_tokens.split(",")]
    repeats = 2 if args.quick else args.repeats
    if args.quick:
        cases = [case.with_generation(prompts_per_round=2) for case in cases]
    generation = cases[0].config.generation
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {os.cpu_count()} CPUs, load average "
          f"{load_average()} at start; {generation.prompts_per_round} prompts × G = "
          f"{generation.group_size}, chunks of {generation.batch_size}; {repeats} timed calls of each method")
    results = []
    with torch_threads_kept():
        for case in cases:
            for count in threads:
                for length in lengths:
                    r = measure(case, count, length, repeats)
                    results.append(r)
                    print(f"{r.label}, {r.threads} thread(s), ≤ {r.max_new_tokens} tokens: backend "
                          f"{r.tokens_per_s('backend'):,.0f} tok/s, raw {r.tokens_per_s('raw'):,.0f} tok/s", flush=True)
    print_results(results)
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
