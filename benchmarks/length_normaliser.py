"""Which length normaliser L the per-sequence weight should use across tokenizers (docs/loss.md): the receiver's
token count, the generator's, or characters, measured on the warm starts of the cross-tokenizer grid.

Run (from the repo root):  python -m benchmarks.length_normaliser [--models small-bpe,small,small-twin]
    [--problems 1000] [--group-size 8] [--seed 0] [--quick]
Options as ``benchmarks.tokenization_gap`` (whose samples and scores this reuses), but --models defaults to the
grid's three: its cross-tokenizer pair (``small-bpe``, ``small``) and ``small-twin``, the character-tokenizer
partner of ``small`` (another warm start of the same recipe), the reference pair on one tokenizer. About 2 min
with the defaults on a 2-core VM once the warm starts are cached; --quick takes seconds.

Method: every model samples G completions for each problem (``tokenization_gap.measure``); every other model, and
the model itself, scores each completion text as a receiving node does (its prompt, its canonical tokenization
τ_c, teacher-forced). Per completion, the log-ratio the weight reads is log π_gen(τ_s) − log π_θold(τ_c): the
generator's claim (Σ of its sampler log-probs over the ids it sampled) against the receiver's score. It is
divided by each candidate L:
- receiver's tokens: len(τ_c), the end-of-sequence token included when the sample stopped (the loss's L);
- generator's tokens: len(τ_s), the end-of-sequence token included likewise;
- characters: the text's characters (Python str length; the texts are ASCII), +1 when the sample stopped, so
  that the end of sequence counts once in all three.
For each, x̄ = log-ratio / L, the weight exp(−x̄) before truncation, the share above the grid's C, and
D = k3(x̄) = exp(x̄) − x̄ − 1 against the grid's g and against g = 1. A model on its own samples has x̄ = 0 but
where it sampled non-canonically (or by float noise): the floor.
Check, on one tokenizer: the mean over τ_s of the per-token log-ratios (each sampled token's sampler log-prob
against the receiver's teacher-forced log-prob of it, a forward pass of its own) equals x̄ with L = the token
count wherever τ_s = τ_c, to float error.
"""

from dataclasses import dataclass

import numpy as np

SMALL_G = 1.0  # a low divergence threshold, to show how each L moves the filter


@dataclass
class Pair:
    """One model's completions as another model (or itself) receives them: the claims and the receiver's scores."""

    generator: str
    receiver: str
    same_tokenizer: bool
    log_ratios: np.ndarray  # (S,) log π_gen(τ_s) − log π_θold(τ_c)
    lengths: dict[str, np.ndarray]  # candidate L -> (S,) its count per completion
    per_token: np.ndarray | None  # (S,) mean of the per-token log-ratios over τ_s; on one tokenizer only
    canonical: np.ndarray  # (S,) bool, τ_s = τ_c of the receiver (on one tokenizer)
    C: float
    g: float


NORMALISERS = {  # candidate L -> its count for (sample, the receiver's TextScore)
    "receiver's tokens": lambda sample, score: score.L,
    "generator's tokens": lambda sample, score: len(sample.sampled),
    "characters (+1 at a stop)": lambda sample, score: len(sample.text) + sample.stop,
}


def same_vocabulary(a, b) -> bool:
    return a.tokenizer.get_vocab() == b.tokenizer.get_vocab()


def pair(sender, receiver) -> Pair:
    """``sender``'s samples (a tokenization_gap.ModelResult) scored by ``receiver`` as a receiving node does."""
    scores = [sample.own if receiver is sender else receiver.scorer.score(sample.problem, sample.text, sample.stop)
              for sample in sender.samples]
    samples = sender.samples
    log_ratios = np.array([s.sampler_sum - score.logp_canonical for s, score in zip(samples, scores, strict=True)])
    lengths = {name: np.array([count(s, score) for s, score in zip(samples, scores, strict=True)], np.float64)
               for name, count in NORMALISERS.items()}
    same = same_vocabulary(sender.scorer, receiver.scorer)
    per_token = per_token_means(samples, receiver.scorer) if same else None
    canonical = np.array([same and s.sampled == score.canonical for s, score in zip(samples, scores, strict=True)])
    return Pair(sender.label, receiver.label, same, log_ratios, lengths, per_token, canonical, receiver.C, receiver.g)


def per_token_means(samples, receiver) -> np.ndarray:
    """(S,) mean over τ_s of the per-token log-ratios log π_gen(t) − log π_θold(t), each token's sampler log-prob
    against its own teacher-forced score by ``receiver`` (a Scorer of the generator's tokenizer), a problem's
    samples in one batch: the per-token form's x̄, computed apart from the sums the sequence form reads."""
    from benchmarks.tokenization_gap import token_logprobs

    means = np.empty(len(samples))
    by_problem: dict[int, list[int]] = {}
    for index, sample in enumerate(samples):
        by_problem.setdefault(sample.problem, []).append(index)
    for problem, indices in by_problem.items():
        scored = token_logprobs(receiver.model, receiver.prompts[problem], [samples[i].sampled for i in indices],
                                receiver.temperature)
        for i, old in zip(indices, scored, strict=True):
            means[i] = np.mean(samples[i].sampler_logprobs - old)
    return means


@dataclass
class Figures:
    """What one L makes of one pair's log-ratios."""

    p5: float
    p50: float
    p95: float
    weight_mean: float  # exp(−x̄) before truncation
    truncated: float  # share with exp(−x̄) > C
    flagged: float  # share with D > g
    flagged_small: float  # share with D > SMALL_G


def figures(log_ratios: np.ndarray, lengths: np.ndarray, C: float, g: float) -> Figures:
    """x̄ = log_ratios / lengths and what the weight and the filter make of it (docs/loss.md)."""
    x = log_ratios / lengths  # (S,)
    k3 = np.expm1(x) - x  # D
    weight = np.exp(-x)
    return Figures(*np.percentile(x, [5, 50, 95]).tolist(), float(weight.mean()), float(np.mean(weight > C)),
                   float(np.mean(k3 > g)), float(np.mean(k3 > SMALL_G)))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3g}" if b else "—"


def print_pairs(pairs: list[Pair]) -> None:
    from benchmarks.swarm_common import print_table

    C, g = pairs[0].C, pairs[0].g
    print(f"\nx̄ = (log π_gen(τ_s) − log π_θold(τ_c)) / L for each candidate L; weight exp(−x̄) before truncation at "
          f"C = {C:g}; D = k3(x̄) against g = {g:g} and g = {SMALL_G:g}")
    rows = [("generator → receiver", "L", "samples", "L mean", "x̄ p5", "p50", "p95", "weight mean", "> C",
             f"D > {g:g}", f"D > {SMALL_G:g}")]
    for p in pairs:
        for name, lengths in p.lengths.items():
            f = figures(p.log_ratios, lengths, p.C, p.g)
            rows.append((f"{p.generator} → {p.receiver}", name, str(len(p.log_ratios)), f"{lengths.mean():.2f}",
                         f"{f.p5:.3g}", f"{f.p50:.3g}", f"{f.p95:.3g}", f"{f.weight_mean:.3g}", f"{f.truncated:.2%}",
                         f"{f.flagged:.2%}", f"{f.flagged_small:.2%}"))
    print_table(rows, left=2)

    by_ends = {(p.generator, p.receiver): p for p in pairs}
    crossed = [(p, by_ends[p.receiver, p.generator]) for p in pairs
               if p.generator < p.receiver and (p.receiver, p.generator) in by_ends]
    if crossed:
        print("\nthe two directions of each pair side by side: x̄ p50 and p95 − p5 (spread), a → b / b → a")
        rows = [("pair a, b", "L", "p50 a → b", "p50 b → a", "ratio", "spread a → b", "spread b → a", "ratio")]
        for ab, ba in crossed:
            for name in ab.lengths:
                fa, fb = (figures(p.log_ratios, p.lengths[name], p.C, p.g) for p in (ab, ba))
                spread_a, spread_b = fa.p95 - fa.p5, fb.p95 - fb.p5
                rows.append((f"{ab.generator}, {ab.receiver}", name, f"{fa.p50:.3g}", f"{fb.p50:.3g}",
                             ratio(fa.p50, fb.p50), f"{spread_a:.3g}", f"{spread_b:.3g}", ratio(spread_a, spread_b)))
        print_table(rows, left=2)

    print("\ncheck on one tokenizer: x̄ with L = the token count against the mean per-token log-ratio over τ_s")
    rows = [("generator → receiver", "samples", "τ_s = τ_c", "max |Δ| there", "max |Δ| where τ_s ≠ τ_c")]
    for p in pairs:
        if p.per_token is None:
            continue
        gap = np.abs(p.log_ratios / p.lengths["receiver's tokens"] - p.per_token)
        elsewhere = gap[~p.canonical]
        rows.append((f"{p.generator} → {p.receiver}", str(len(gap)), str(int(p.canonical.sum())),
                     f"{gap[p.canonical].max():.1e}" if p.canonical.any() else "—",
                     f"{elsewhere.max():.3g}" if elsewhere.size else "—"))
    print_table(rows)


def main(argv: list[str] | None = None) -> None:
    import time

    from benchmarks.demo_nodes import load_average
    from benchmarks.tokenization_gap import measure_models, one_torch_thread, sample_arguments

    args = sample_arguments(__doc__.splitlines()[0], "small-bpe,small,small-twin", argv)
    started = time.perf_counter()
    with one_torch_thread():
        results = measure_models(args)
        pairs = [pair(sender, receiver) for sender in results for receiver in results]
    for r in results:
        print(f"{r.label}: {len(r.samples)} samples ({r.left_out} left out), mean reward {r.mean_reward:.3f}")
    print_pairs(pairs)
    print(f"\n{time.perf_counter() - started:.1f} s; load average {load_average()} at the end")


if __name__ == "__main__":
    main()
