"""What ignoring other tokenizations costs the per-sequence weight (docs/loss.md): the gap between a completion
text's log-prob, summed over every tokenization of it, and the log-prob of the one tokenization each side scores.

Run (from the repo root):  python -m benchmarks.tokenization_gap [--models small-bpe,small] [--problems 1000]
    [--group-size 8] [--seed 0] [--quick]
--models: labels of node/experiment/tokenizers.toml (default its BPE model and its character model, the grid's
cross-tokenizer pair); --problems: held-out problems per model (default 1,000); --group-size: completions per
problem (default the grid's G = 8); --quick: 6 problems × 4 completions on the grid's quick warm starts (20
steps: a smoke test, not a measurement). One torch thread; about 50 s with the defaults on a 2-core VM once the
two warm starts are cached (training one takes about 100 s).

Method:
1. Model: the grid's warm start of each label (``cell.warm_start_of``: the same recipe and seed as every cell
   of ``tokenizers.toml``, from the cache, trained now if absent), float32 on the CPU. ``small-bpe`` is
   tiny-small on the BPE tokenizer (digit pairs and prompt words are single tokens), ``small`` the same
   architecture on the character tokenizer.
2. Samples: the grid's task (addition of 1–2-digit numbers), problems of its held-out split, prompts as the node
   renders them (``prompt_ids``, chat template as the node decides: off for tiny models); G completions each from
   the node's own generator (``make_generator("transformers", ...)``) at the grid's sampling settings (T = 1,
   no top-k or top-p, ``max_new_tokens`` 5), with the sampled ids and their sampler log-probs.
3. Tokenizations: a completion's text y is its ids decoded without special tokens, as a node sends it. Every
   sequence of the tokenizer's ordinary tokens (tags included, special tokens not) whose strings concatenate to
   y, by dynamic programming over y's characters, each decoded back to y as a check; the end-of-sequence token
   after each when the sample stopped. Samples with a special token before their end are counted and left out
   (their ids are not a tokenization of their text).
4. Scores: each tokenization teacher-forced after the prompt (logits / T, the whole distribution, as the
   trainer scores), summed: log π(τ). log π(y) is the logsumexp over all of them (the model's, not capped at
   ``max_new_tokens``); τ_c is the tokenizer's own encoding of y (what a receiving node scores: it re-tokenizes
   the text), τ_s the sampled ids. δ_c = log π(y) − log π(τ_c) and δ_s = log π(y) − log π(τ_s), both ≥ 0;
   L = the tokens of τ_c (end-of-sequence included), the loss's normaliser.
5. The weight: a generator claims log π_gen(τ_s), the receiver scores log π_θold(τ_c); the normalised log-ratio
   x̄ is then off by −(δ_gen − δ_θold)/L and the weight exp(−x̄) by the factor exp((δ_s − δ_c)/L). Both sides
   are the same model here (a BPE generator sending to a receiver of its own tokenizer, the simplest case), so
   the right weight is 1 and the factor is the weight itself: 1 exactly whenever the sample is canonical. D is
   k3 of the error alone, −(δ_s − δ_c)/L (the right x̄ is 0), against the grid's g.
6. Across tokenizers, the grid's pair: each model's samples scored by the other model as a receiving node
   scores them (its prompt for the problem, its canonical tokenization and L, every tokenization for log π(y));
   the factor is exp((δ_s of the generator − δ_c of the receiver) / L of the receiver). Here the right weight is
   not 1 (two models), but its error is the same expression.
Check: Σ sampler log-probs of each sample against its teacher-forced log π(τ_s) (should agree to ~1e-5).
"""

import argparse
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

GRID = Path(__file__).resolve().parent.parent / "node" / "experiment" / "tokenizers.toml"
MAX_TOKENIZATIONS = 100_000  # per text; a completion of ≤ 5 tokens has at most a few hundred
SCORE_BATCH = 256  # sequences per teacher-forced forward pass
LISTED = 20  # non-canonical samples printed one by one


class TooManyTokenizations(ValueError):
    """A text with more tokenizations than the enumeration is allowed to list."""


def ordinary_pieces(tokenizer) -> dict[str, list[int]]:
    """{string: the ids that decode to it} over every token but the special ones (tags included)."""
    special = set(tokenizer.all_special_ids)
    pieces: dict[str, list[int]] = {}
    for token_id in range(len(tokenizer)):
        if token_id not in special:
            pieces.setdefault(tokenizer.decode([token_id]), []).append(token_id)
    pieces.pop("", None)  # a token that decodes to nothing would make the tokenizations of any text infinite
    return pieces


def tokenizations(text: str, pieces: dict[str, list[int]], limit: int = MAX_TOKENIZATIONS) -> list[tuple[int, ...]]:
    """Every sequence of ids in ``pieces`` whose strings concatenate to ``text`` (the empty text: one, empty).
    Counted first (a DP over the text's suffixes), listed only when at most ``limit``."""
    longest = max(map(len, pieces))
    n = len(text)

    def steps(start: int) -> list[tuple[int, int]]:  # (id, where the next piece starts) for each piece at start
        return [(token_id, end) for end in range(start + 1, min(n, start + longest) + 1)
                for token_id in pieces.get(text[start:end], ())]

    count = [0] * n + [1]  # count[i]: tokenizations of text[i:]
    for start in range(n - 1, -1, -1):
        count[start] = sum(count[end] for _, end in steps(start))
    if count[0] > limit:
        raise TooManyTokenizations(f"{text!r} has {count[0]:,} tokenizations (limit {limit:,})")
    suffixes: list[list[tuple[int, ...]]] = [[] for _ in range(n)] + [[()]]
    for start in range(n - 1, -1, -1):
        suffixes[start] = [(token_id, *rest) for token_id, end in steps(start) for rest in suffixes[end]]
    return suffixes[0]


def token_logprobs(model, prompt: np.ndarray, completions: list[tuple[int, ...]], temperature: float
                   ) -> list[np.ndarray]:
    """(len(completion),) log π(token | prompt, the tokens before it) of each completion, teacher-forced with
    logits / T, right-padded in batches of ``SCORE_BATCH``."""
    import torch

    out = []
    P = len(prompt)
    for start in range(0, len(completions), SCORE_BATCH):
        chunk = completions[start : start + SCORE_BATCH]
        width = P + max(len(c) for c in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        targets = torch.zeros((len(chunk), width - P), dtype=torch.long)
        for row, completion in enumerate(chunk):
            ids[row, :P] = torch.from_numpy(prompt)
            ids[row, P : P + len(completion)] = torch.tensor(completion, dtype=torch.long)
            mask[row, : P + len(completion)] = 1
            targets[row, : len(completion)] = torch.tensor(completion, dtype=torch.long)
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=mask).logits[:, P - 1 : width - 1].float()  # (B, T, V)
            logprobs = (logits / temperature).log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
        rows = logprobs.double().numpy()
        out.extend(rows[row, : len(completion)] for row, completion in enumerate(chunk))
    return out


def sequence_logprobs(model, prompt: np.ndarray, completions: list[tuple[int, ...]], temperature: float) -> np.ndarray:
    """(K,) log π(completion | prompt) of each completion: its ``token_logprobs`` summed."""
    return np.array([t.sum() for t in token_logprobs(model, prompt, completions, temperature)], np.float64)


@dataclass
class TextScore:
    """One model's scores of one completion text (with its end-of-sequence token when the sample stopped)."""

    logp_text: float  # log π(y): logsumexp over every tokenization
    logp_canonical: float  # log π(τ_c), τ_c the tokenizer's own encoding of y
    L: int  # tokens of τ_c, end-of-sequence included
    tokenizations: int
    canonical: tuple[int, ...]
    logp_of: dict[tuple[int, ...], float]  # log π(τ) of every tokenization τ

    @property
    def delta(self) -> float:
        """δ_c = log π(y) − log π(τ_c) ≥ 0."""
        return self.logp_text - self.logp_canonical


@dataclass
class Scorer:
    """A model with its tokenizer, the prompts it renders for the chosen problems and its ordinary pieces."""

    label: str
    tokenizer: object
    model: object
    prompts: list[np.ndarray]  # by problem index
    temperature: float
    pieces: dict[str, list[int]] = field(init=False)

    def __post_init__(self):
        self.pieces = ordinary_pieces(self.tokenizer)

    def score(self, problem: int, text: str, stop: bool) -> TextScore:
        """Every tokenization of ``text`` (then the end-of-sequence token if ``stop``) scored after the prompt."""
        eos = (self.tokenizer.eos_token_id,) if stop else ()
        every = [(*t, *eos) for t in tokenizations(text, self.pieces)]
        assert all(self.tokenizer.decode(list(t), skip_special_tokens=True) == text for t in every), text
        canonical = (*self.tokenizer(text, add_special_tokens=False)["input_ids"], *eos)
        logps = sequence_logprobs(self.model, self.prompts[problem], every, self.temperature)
        logp_of = dict(zip(every, logps.tolist(), strict=True))
        return TextScore(float(np.logaddexp.reduce(logps)), logp_of[canonical], len(canonical), len(every), canonical,
                         logp_of)


@dataclass
class Sample:
    problem: int
    text: str
    stop: bool  # ended by the end-of-sequence token (else cut at max_new_tokens)
    sampled: tuple[int, ...]  # τ_s, the ids the generator sampled
    sampler_logprobs: np.ndarray  # (len(τ_s),) the generator's sampler log-probs
    own: TextScore  # the generating model's scores of its text

    @property
    def sampler_sum(self) -> float:
        """log π_gen(τ_s) as the generator claims it: Σ of its sampler log-probs."""
        return float(np.sum(self.sampler_logprobs, dtype=np.float64))

    @property
    def canonical(self) -> bool:
        return self.sampled == self.own.canonical

    @property
    def L(self) -> int:
        return self.own.L

    @property
    def logp_sampled(self) -> float:
        return self.own.logp_of[self.sampled]

    @property
    def delta_canonical(self) -> float:
        return self.own.delta

    @property
    def delta_sampled(self) -> float:
        return self.own.logp_text - self.logp_sampled

    @property
    def weight_factor(self) -> float:
        """exp((δ_gen − δ_θold)/L), receiver = generator (module docstring, step 5)."""
        return weight_factor(self.delta_sampled, self.own)

    @property
    def divergence(self) -> float:
        """D = k3 of the error, receiver = generator."""
        return divergence(self.delta_sampled, self.own)


def weight_factor(delta_gen: float, receiver: TextScore) -> float:
    """How far the per-sequence weight is off: exp((δ_gen − δ_θold)/L), L the receiver's."""
    return math.exp((delta_gen - receiver.delta) / receiver.L)


def divergence(delta_gen: float, receiver: TextScore) -> float:
    """D = k3(x̄) the filter reads when the right x̄ is 0 (generator and receiver agree on every text): the error
    alone, x̄ = (δ_θold − δ_gen)/L."""
    x = (receiver.delta - delta_gen) / receiver.L
    return math.expm1(x) - x


@dataclass
class ModelResult:
    label: str
    scorer: Scorer
    samples: list[Sample]
    left_out: int  # samples with a special token before their end
    mean_reward: float  # over every sample, left out ones included
    g: float  # the grid's divergence threshold
    C: float  # the grid's truncation of the weight
    seconds: float


def measure(grid, label: str, problems: int, group_size: int | None, seed: int) -> ModelResult:
    """Sample ``problems`` × ``group_size`` (None: the grid's G) completions from model ``label``'s warm start and
    score every tokenization of each (module docstring)."""
    from ftis.node.experiment.cell import warm_start_of
    from ftis.node.generation import make_generator
    from ftis.node.models import load_policy
    from ftis.node.tasks import build_task
    from ftis.node.tasks.prompts import prompt_ids, uses_chat_template
    from ftis.protocol import SamplingSettings

    started = time.perf_counter()
    condition = next(name for name in grid.conditions if label in grid.condition_models(name))
    folder = warm_start_of(grid, label, echo=print)
    config = grid.node_config(label, condition, 0, folder)
    policy = load_policy(str(folder))
    tokenizer = policy.tokenizer
    task = build_task(config.task)
    generation = config.generation
    chat = uses_chat_template(tokenizer, config.model.chat_template)
    chosen = [task.problem(grid.id_split, index) for index in range(problems)]
    prompts = [prompt_ids(tokenizer, task.prompt(problem), chat=chat) for problem in chosen]
    sampling = SamplingSettings(generation.temperature, generation.top_p, generation.top_k, generation.max_new_tokens)
    if generation.top_p < 1.0 or generation.top_k:
        raise ValueError("the scores use the whole distribution; the grid's sampling truncates it")
    G = group_size or generation.group_size
    groups = make_generator("transformers", policy, generation).generate(prompts, G, sampling, seed=seed)
    scorer = Scorer(label, tokenizer, policy.model.eval(), prompts, generation.temperature)

    special = set(tokenizer.all_special_ids)
    samples, left_out, rewards = [], 0, []
    for index, (problem, group) in enumerate(zip(chosen, groups, strict=True)):
        for completion in group:
            sampled = tuple(int(i) for i in completion.token_ids)
            stop = completion.finish_reason == "stop"
            text = tokenizer.decode(list(sampled), skip_special_tokens=True)
            rewards.append(task.reward(text, problem.answer))
            if special & set(sampled[: len(sampled) - stop]):
                left_out += 1
                continue
            sampler = np.asarray(completion.sampler_logprobs, np.float64)
            samples.append(Sample(index, text, stop, sampled, sampler, scorer.score(index, text, stop)))
    return ModelResult(label, scorer, samples, left_out, float(np.mean(rewards)), config.loss.divergence_threshold,
                       config.loss.clip_c, time.perf_counter() - started)


@dataclass
class CrossResult:
    """One model's samples sent to another model of the grid, which scores the text its own way."""

    generator: str
    receiver: str
    factors: list[float]  # exp((δ_s of the generator − δ_c of the receiver) / L of the receiver)
    divergences: list[float]
    g: float
    worst: list[tuple[Sample, TextScore]]  # the samples whose weight is furthest off, with the receiver's scores


def cross(sender: ModelResult, receiver: ModelResult) -> CrossResult:
    """The weight error when ``sender``'s samples train ``receiver`` (its prompts, its tokenization, its L)."""
    scored = [receiver.scorer.score(sample.problem, sample.text, sample.stop) for sample in sender.samples]
    pairs = list(zip(sender.samples, scored, strict=True))
    factors = [weight_factor(sample.delta_sampled, score) for sample, score in pairs]
    divergences = [divergence(sample.delta_sampled, score) for sample, score in pairs]
    order = np.argsort(-np.abs(np.log(factors)))[:LISTED // 2]
    worst = [(sender.samples[i], scored[i]) for i in order if factors[i] != 1.0]
    return CrossResult(sender.label, receiver.label, factors, divergences, receiver.g, worst)


FIGURES = {  # figure name -> its value per sample
    "δ_c = log π(y) − log π(τ_c)": lambda s: s.delta_canonical,
    "δ_s = log π(y) − log π(τ_s)": lambda s: s.delta_sampled,
    "δ_c / L": lambda s: s.delta_canonical / s.L,
    "δ_s / L": lambda s: s.delta_sampled / s.L,
    "weight factor exp((δ_s − δ_c)/L)": lambda s: s.weight_factor,
    "D = k3((δ_c − δ_s)/L)": lambda s: s.divergence,
}


def summary(values: list[float]) -> tuple[float, float, float, float, float]:
    """(mean, p50, p95, max, min) of ``values``."""
    v = np.asarray(values, np.float64)
    return float(v.mean()), float(np.percentile(v, 50)), float(np.percentile(v, 95)), float(v.max()), float(v.min())


def shown(tokenizer, ids: tuple[int, ...]) -> str:
    """Token strings separated by spaces, whitespace escaped (a table cell)."""
    return " ".join(repr(token)[1:-1] for token in tokenizer.convert_ids_to_tokens(list(ids)))


def off_by(factors: list[float], share: float) -> float:
    """The share of ``factors`` more than ``share`` away from 1."""
    return float(np.mean(np.abs(np.asarray(factors) - 1) > share))


def print_results(results: list[ModelResult], crossed: list[CrossResult]) -> None:
    from benchmarks.swarm_common import print_table

    rows = [("model", "samples", "left out", "mean reward", "not canonical", "tokenizations mean", "max", "L mean",
             "sampler vs scored, max |Δ|")]
    for r in results:
        s = r.samples
        rows.append((r.label, str(len(s)), str(r.left_out), f"{r.mean_reward:.3f}",
                     f"{np.mean([not x.canonical for x in s]):.2%}", f"{np.mean([x.own.tokenizations for x in s]):.1f}",
                     str(max(x.own.tokenizations for x in s)), f"{np.mean([x.L for x in s]):.2f}",
                     f"{max(abs(x.sampler_sum - x.logp_sampled) for x in s):.1e}"))
    print_table(rows)
    print("\nreceiver = generator (the same model scores its own samples):")
    rows = [("model", "figure", "samples", "mean", "p50", "p95", "max", "min")]
    for r in results:
        kinds = {"all": r.samples, "not canonical": [x for x in r.samples if not x.canonical]}
        for name, value in FIGURES.items():
            for kind, chosen in kinds.items():
                if not chosen or (kind != "all" and not name.startswith(("weight", "D "))):
                    continue
                mean, p50, p95, top, bottom = summary([value(x) for x in chosen])
                label = name if kind == "all" else f"{name}, not canonical only"
                rows.append((r.label, label, str(len(chosen)), f"{mean:.3g}", f"{p50:.3g}", f"{p95:.3g}",
                             f"{top:.3g}", f"{bottom:.3g}"))
    print_table(rows, left=2)
    listed = [(r, x) for r in results for x in r.samples if not x.canonical][:LISTED]
    if listed:
        print(f"\nnon-canonical samples (the first {LISTED}):")
        rows = [("model", "text", "sampled τ_s", "canonical τ_c", "L", "δ_s", "δ_c", "weight factor", "D")]
        for r, x in listed:
            tokenizer = r.scorer.tokenizer
            rows.append((r.label, repr(x.text), shown(tokenizer, x.sampled), shown(tokenizer, x.own.canonical),
                         str(x.L), f"{x.delta_sampled:.3g}", f"{x.delta_canonical:.3g}", f"{x.weight_factor:.3g}",
                         f"{x.divergence:.3g}"))
        print_table(rows, left=4)
    if crossed:
        print("\nacross tokenizers (the grid's pair): the generator's δ_s against the receiver's δ_c of the same text")
        rows = [("generator → receiver", "samples", "factor mean", "p50", "p5", "p95", "min", "max", "off > 1%",
                 "off > 10%", "D > g")]
        for c in crossed:
            f = np.asarray(c.factors)
            rows.append((f"{c.generator} → {c.receiver}", str(len(f)), f"{f.mean():.4g}", f"{np.percentile(f, 50):.4g}",
                         f"{np.percentile(f, 5):.4g}", f"{np.percentile(f, 95):.4g}", f"{f.min():.3g}",
                         f"{f.max():.4g}", f"{off_by(c.factors, 0.01):.2%}", f"{off_by(c.factors, 0.1):.2%}",
                         f"{np.mean(np.asarray(c.divergences) > c.g):.2%}"))
        print_table(rows)
        by_label = {r.label: r for r in results}
        print(f"\nacross tokenizers, the samples whose weight is furthest off (up to {LISTED // 2} each way):")
        rows = [("generator → receiver", "text", "receiver's τ_c", "its likeliest τ", "L", "δ_s (generator)",
                 "δ_c (receiver)", "weight factor")]
        for c in crossed:
            tokenizer = by_label[c.receiver].scorer.tokenizer
            for sample, score in c.worst:
                likeliest = max(score.logp_of, key=score.logp_of.get)
                rows.append((f"{c.generator} → {c.receiver}", repr(sample.text),
                             shown(tokenizer, score.canonical), shown(tokenizer, likeliest),
                             str(score.L), f"{sample.delta_sampled:.3g}",
                             f"{score.delta:.3g}", f"{weight_factor(sample.delta_sampled, score):.3g}"))
        print_table(rows, left=4)
    print()
    for r in results:
        factors = [x.weight_factor for x in r.samples]
        filtered = np.mean([x.divergence > r.g for x in r.samples])
        print(f"{r.label}: weight off by more than 1% in {off_by(factors, 0.01):.2%} of samples, by more than 10% in "
              f"{off_by(factors, 0.1):.2%}; D > g = {r.g:g} in {filtered:.2%}; {r.seconds:.1f} s")


def sample_arguments(description: str, models: str, argv: list[str] | None) -> argparse.Namespace:
    """The command line both measurements share: which models, how many samples, the seed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", default=models, help="labels of tokenizers.toml, comma-separated")
    parser.add_argument("--problems", type=int, default=1000, help="held-out problems per model (default 1000)")
    parser.add_argument("--group-size", type=int, default=None, help="completions per problem (default the grid's)")
    parser.add_argument("--seed", type=int, default=0, help="the generator's sampling seed")
    parser.add_argument("--quick", action="store_true", help="6 problems × 4 completions, the grid's quick warm-up")
    return parser.parse_args(argv)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread inside, as it was after (the measurements' figures are one thread's)."""
    import torch

    from benchmarks.demo_nodes import torch_threads_kept

    with torch_threads_kept():
        torch.set_num_threads(1)
        yield


def measure_models(args: argparse.Namespace) -> list["ModelResult"]:
    """Each model of ``args.models`` measured (``measure``), after a line saying how (call it in
    ``one_torch_thread``)."""
    import torch

    from benchmarks.demo_nodes import load_average
    from ftis.node.experiment.grid import load_grid

    grid = load_grid(GRID).adjusted(quick=args.quick)  # --quick: the grid's quick warm-up (seconds, not minutes)
    problems = 6 if args.quick else args.problems
    group_size = 4 if args.quick else args.group_size
    print(f"torch {torch.__version__}, 1 thread, load average {load_average()} at start; {problems} held-out "
          f"problems × G = {group_size or 'the grid’s'}, sampling seed {args.seed}")
    return [measure(grid, label.strip(), problems, group_size, args.seed) for label in args.models.split(",")]


def main(argv: list[str] | None = None) -> None:
    from benchmarks.demo_nodes import load_average

    args = sample_arguments(__doc__.splitlines()[0], "small-bpe,small", argv)
    with one_torch_thread():
        results = measure_models(args)
        crossed = [cross(sender, receiver) for sender in results for receiver in results if sender is not receiver]
    print_results(results, crossed)
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
