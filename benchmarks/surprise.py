"""How surprising each kind of completion is to a node's own model: what ``[loss] max_surprise`` and
``surprise_window`` are chosen from.

Run (from the repo root):  python -m benchmarks.surprise [--problems 48] [--windows 1,2,4,6,8] [--warmup-steps N]

Setting: arithmetic in the tags format (three one-digit operands, ``<think> 7-2+9=14 </think>\\n<answer> 14
</answer>``), the receiver ``small`` (tiny-small, full) and an honest peer of another model ``medium``
(tiny-medium), both warm-started as the poisoning benchmark's (1,500 and 1,000 steps; shared through the warm-up
cache). For ``--problems`` training problems: 8 samples of each model (temperature 1, at most 48 new tokens), and
three payloads on each problem's correct completion: the phrase "all hail to the thief" in the reasoning (out of
context), a false first step ``a+b=a+b+1`` (in context), and the fixed "2+2=5". For each, with the receiver's own
log-probs, the largest mean surprise (−log-prob, nats a token) over any ``w`` tokens in a row; a completion shorter
than ``w`` has none (never judged).
Prints, per window, each kind's median, p90, p99 and largest surprise and the share above 2, 3, 4, 5, 6, 8 nats:
the share of the receiver's own samples and of the honest peer's above a threshold is what the check costs, the
payloads' share what it stops.
"""

import argparse
import copy

import numpy as np

# The receiver and its honest peer as the poisoning benchmark warms them, on the tags format.
GRID = {
    "seeds": 1, "rounds": 1, "eval_every": 1, "eval_problems": 100, "warmup_seed": 0, "reference": "solo",
    "node": {"task": {"name": "arithmetic", "split": "train",
                      "arithmetic": {"max_digits": 1, "operands": 3, "operations": "+-", "format": "tags"}},
             "generation": {"prompts_per_round": 16, "group_size": 8, "max_new_tokens": 48, "batch_size": 64}},
    "models": {"small": {"name": "tiny-small", "learning_rate": 1e-4,
                         "warmup": {"steps": 1500, "learning_rate": 3e-3, "batch_size": 32}},
               "medium": {"name": "tiny-medium", "learning_rate": 1e-4,
                          "warmup": {"steps": 1000, "learning_rate": 1e-3, "batch_size": 32}}},
    "conditions": {"solo": {"swarm": False}, "clean": {"variant": "ftis"}},
    "quick": {"seeds": 1, "rounds": 1, "eval_every": 1, "eval_problems": 100, "warmup_steps": 500},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=48)
    parser.add_argument("--windows", default="1,2,4,6,8")
    parser.add_argument("--warmup-steps", type=int, default=None, help="The receiver's warm-up steps (default 1500).")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(2)
    from ftis.node.experiment.cell import prepare_warm_starts
    from ftis.node.experiment.grid import Grid
    from ftis.node.generation.factory import make_generator
    from ftis.node.models.loading import load_policy
    from ftis.node.tasks import build_task
    from ftis.node.tasks.prompts import Prompter
    from ftis.node.tasks.tags import tagged_completion
    from ftis.protocol import SamplingSettings

    data = copy.deepcopy(GRID)
    if args.warmup_steps is not None:
        data["models"]["small"]["warmup"]["steps"] = args.warmup_steps
    grid = Grid.model_validate(data)
    warm = prepare_warm_starts(grid, print)
    config = grid.node_config("small", "clean", 0, warm["small"])
    task = build_task(config.task)
    policies = {label: load_policy(str(warm[label])) for label in ("small", "medium")}
    receiver = policies["small"]
    tokenizer = receiver.tokenizer
    prompter = Prompter.build(tokenizer, task)
    problems = [task.problem("train", i) for i in range(args.problems)]
    prompts = [prompter.ids(problem) for problem in problems]
    sampling = SamplingSettings(1.0, 1.0, 0, 48)

    kinds: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for label, policy in policies.items():
        generator = make_generator("transformers", policy, config.generation, seed=1)
        groups = generator.generate(prompts, 8, sampling, seed=3)
        kinds[f"{label} samples"] = [(prompt, np.asarray(c.token_ids)) for prompt, group in zip(prompts, groups,
                                                                                                strict=True)
                                     for c in group if len(c.token_ids)]
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    payloads = {"out-of-context": "all hail to the thief ", "in-context": None, "2+2=5": "2+2=5 "}
    for kind, inserted in payloads.items():
        rows = []
        for problem, prompt in zip(problems, prompts, strict=True):
            gold = tagged_completion(f"{problem.question}={problem.answer}", problem.answer)
            if inserted is None:  # the first two operands' sum, off by one
                a, op, b = problem.question[0], problem.question[1], problem.question[2]
                first = int(a) + int(b) if op == "+" else int(a) - int(b)
                inserted = f"{a}{op}{b}={first + 1} "
            text = gold.replace("<think> ", f"<think> {inserted}", 1)
            rows.append((prompt, np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"] + eos)))
            inserted = payloads[kind]
        kinds[kind] = rows

    def own_logprobs(prompt: np.ndarray, completion: np.ndarray) -> np.ndarray:
        ids = torch.tensor(np.concatenate([prompt, completion]))[None]
        with torch.no_grad():
            logits = receiver.model(ids).logits[0, len(prompt) - 1 : -1].float()
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].numpy()

    scored = {kind: [own_logprobs(prompt, completion) for prompt, completion in rows] for kind, rows in kinds.items()}
    for window in (int(w) for w in args.windows.split(",")):
        print(f"window {window}: largest mean surprise over {window} tokens in a row, nats a token")
        for kind, rows in scored.items():
            worst = np.array([-min(lp[i : i + window].mean() for i in range(len(lp) - window + 1))
                              for lp in rows if len(lp) >= window])
            if not len(worst):
                print(f"  {kind:<16} none as long")
                continue
            p50, p90, p99, top = np.percentile(worst, [50, 90, 99, 100])
            above = " ".join(f">{s}: {(worst > s).mean():.3f}" for s in (2, 3, 4, 5, 6, 8))
            print(f"  {kind:<16} n={len(worst):>4} (of {len(rows)}) p50 {p50:5.2f} p90 {p90:5.2f} p99 {p99:5.2f} "
                  f"max {top:5.2f}  {above}")


if __name__ == "__main__":
    main()
