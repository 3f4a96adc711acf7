"""How surprising each kind of completion is to a node's own model: what ``[loss] max_surprise`` and
``surprise_window`` are chosen from.

Run (from the repo root):  python -m benchmarks.surprise [--problems 48] [--windows 1,2,4,6,8] [--warmup-steps N]
                           python -m benchmarks.surprise --real [--problems 24] [--formats plain,tags]

Setting: arithmetic in the tags format (three one-digit operands, ``<think> 7-2+9=14 </think>\\n<answer> 14
</answer>``), the receiver ``small`` (tiny-small, full) and an honest peer of another model ``medium``
(tiny-medium), both warm-started as the poisoning benchmark's (1,500 and 1,000 steps; shared through the warm-up
cache). For ``--problems`` training problems: 8 samples of each model (temperature 1, at most 48 new tokens), and
five payloads first in the reasoning of each problem's correct completion (``PAYLOADS``): the phrase "all hail to
the thief" (out of context), a false first step ``a+b=a+b+1`` (in context), the fixed "2+2=5", and what an attacker
that knows both checks would send instead: "two plus two is five" (a false step the arithmetic check cannot read)
and the true reasoning written three times more (the denial of service, plausible). For each, with the receiver's own
log-probs, the largest mean surprise (−log-prob, nats a token) over any ``w`` tokens in a row; a completion shorter
than ``w`` has none (never judged).
Prints, per window, each kind's median, p90, p99 and largest surprise and the share above 2, 3, 4, 5, 6, 8 nats:
the share of the receiver's own samples and of the honest peer's above a threshold is what the check costs, the
payloads' share what it stops.

``--real`` (after ``models fetch --all``): the same on the real demo's two models (``examples/demo-real.toml``:
SmolLM2-135M-Instruct and Gemma 3 270M, two tokenizers), each the receiver in turn and the other its honest peer,
in two formats: the demo's bare answers (``plain``, "47+38=" -> "85") and written reasoning (``tags``, the same
8 solved examples written ``<think> 47+38=85 </think> <answer> 85 </answer>``). The peer's completions reach the
receiver as text and are read in its own tokens as its intake reads them (``Retokenizer``); samples are counted
where their answer is right (only those can be trained up: a wrong one is dropped for its advantage anyway), and all
of them (a bound on what an honest peer's text trips).
"""

import argparse
import copy
import re
import time

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




def false_first_step(question: str, answer: str) -> str:
    """The first two operands' result, off by one: ``7-2=6`` for ``7-2+9``."""
    a, op, b = re.match(r"(\d+)([+-])(\d+)", question).groups()
    return f"{a}{op}{b}={int(a) + int(b) + 1 if op == '+' else int(a) - int(b) + 1} "


# kind -> the text put first in the reasoning of a problem's correct completion
PAYLOADS = {
    "out-of-context": lambda question, answer: "all hail to the thief ",
    "in-context": false_first_step,
    "2+2=5": lambda question, answer: "2+2=5 ",
    # an attacker that knows both checks: the false step in words (the arithmetic check reads no words) ...
    "2+2=5 in words": lambda question, answer: "two plus two is five ",
    # ... and the paper's denial of service made plausible: the true reasoning written three times more
    "true reasoning repeated": lambda question, answer: f"{question}={answer} " * 3,
}
REAL_FORMATS = {  # --real: what each format changes in the real demo's node settings
    "plain": {},
    "tags": {"task.arithmetic.format": "tags", "generation.max_new_tokens": 40, "generation.stop": ["</answer>"]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=None, help="training problems (default 48; --real 24)")
    parser.add_argument("--windows", default="1,2,4,6,8")
    parser.add_argument("--warmup-steps", type=int, default=None, help="The receiver's warm-up steps (default 1500).")
    parser.add_argument("--real", action="store_true", help="the real demo's two models, each receiving the other's")
    parser.add_argument("--formats", default="plain,tags", help="--real: formats (plain, tags)")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]

    import torch

    torch.set_num_threads(2)
    if args.real:
        for name in args.formats.split(","):
            real_format(name, args.problems or 24, windows)
        return
    tiny(args.problems or 48, windows, args.warmup_steps)


def tiny(count: int, windows: list[int], warmup_steps: int | None) -> None:
    from ftis.node.experiment.cell import prepare_warm_starts
    from ftis.node.experiment.grid import Grid
    from ftis.node.generation.factory import make_generator
    from ftis.node.models.loading import load_policy
    from ftis.node.tasks import build_task
    from ftis.node.tasks.prompts import Prompter
    from ftis.protocol import SamplingSettings

    data = copy.deepcopy(GRID)
    if warmup_steps is not None:
        data["models"]["small"]["warmup"]["steps"] = warmup_steps
    grid = Grid.model_validate(data)
    warm = prepare_warm_starts(grid, print)
    config = grid.node_config("small", "clean", 0, warm["small"])
    task = build_task(config.task)
    policies = {label: load_policy(str(warm[label])) for label in ("small", "medium")}
    receiver = policies["small"]
    tokenizer = receiver.tokenizer
    prompter = Prompter.build(tokenizer, task)
    problems = [task.problem("train", i) for i in range(count)]
    prompts = [prompter.ids(problem) for problem in problems]
    sampling = SamplingSettings(1.0, 1.0, 0, 48)

    kinds: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for label, policy in policies.items():
        generator = make_generator("transformers", policy, config.generation, seed=1)
        groups = generator.generate(prompts, 8, sampling, seed=3)
        kinds[f"{label} samples"] = [
            (prompt, np.asarray(c.token_ids))
            for prompt, group in zip(prompts, groups, strict=True)
            for c in group
            if len(c.token_ids)
        ]
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for kind, text in payload_texts(problems).items():
        kinds[kind] = [
            (prompt, np.asarray(tokenizer(t, add_special_tokens=False)["input_ids"] + eos))
            for prompt, t in zip(prompts, text, strict=True)
        ]
    report(
        {
            kind: [own_logprobs(receiver.model, prompt, completion) for prompt, completion in rows]
            for kind, rows in kinds.items()
        },
        windows,
    )


def payload_texts(problems) -> dict[str, list[str]]:
    """Each payload (``PAYLOADS``) first in the reasoning of each problem's correct tags completion."""
    from ftis.node.tasks.tags import tagged_completion

    texts: dict[str, list[str]] = {}
    for kind, inserted in PAYLOADS.items():
        texts[kind] = [
            tagged_completion(f"{inserted(p.question, p.answer)}{p.question}={p.answer}", p.answer) for p in problems
        ]
    return texts


def own_logprobs(model, prompt: np.ndarray, completion: np.ndarray) -> np.ndarray:
    """Each completion token's log-prob under ``model`` after ``prompt`` (teacher-forced)."""
    import torch

    ids = torch.tensor(np.concatenate([prompt, completion]))[None]
    with torch.no_grad():
        logits = model(ids, logits_to_keep=len(completion) + 1).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].numpy()


def report(scored: dict[str, list[np.ndarray]], windows: list[int]) -> None:
    for window in windows:
        print(f"window {window}: largest mean surprise over {window} tokens in a row, nats a token")
        for kind, rows in scored.items():
            worst = np.array(
                [
                    -min(lp[i : i + window].mean() for i in range(len(lp) - window + 1))
                    for lp in rows
                    if len(lp) >= window
                ]
            )
            if not len(worst):
                print(f"  {kind:<22} none as long (of {len(rows)})")
                continue
            p50, p90, p99, top = np.percentile(worst, [50, 90, 99, 100])
            above = " ".join(f">{s}: {(worst > s).sum() / len(rows):.3f}" for s in (2, 3, 4, 5, 6, 8))
            print(
                f"  {kind:<22} n={len(worst):>4} (of {len(rows)}) p50 {p50:5.2f} p90 {p90:5.2f} p99 {p99:5.2f} "
                f"max {top:5.2f}  {above}",
                flush=True,
            )


def real_format(name: str, count: int, windows: list[int]) -> None:
    """The real demo's two models, each the receiver of the other's right answers in format ``name``."""
    from benchmarks.learning import REAL_DEMO, node_config
    from ftis.node.experiment.lockstep import LockstepSwarm
    from ftis.node.intake.text_groups import Retokenizer
    from ftis.node.runner.join import build_node

    started = time.perf_counter()
    nodes = {}
    for label in ("smollm2", "gemma"):
        config = node_config(label, 0, tuple(REAL_FORMATS[name].items()), str(REAL_DEMO))
        swarm = LockstepSwarm(1, config.swarm)
        nodes[label] = build_node(
            config, transport_factory=lambda fingerprint, s=swarm, n=label: s.transport(n, fingerprint)
        )
    problems = [nodes["smollm2"].task.problem("train", i) for i in range(count)]
    samples, every = {}, {}  # label -> [(problem, text, finish)] of its right answers, of all its samples
    for label, node in nodes.items():
        prompts = [node.prompter.ids(problem) for problem in problems]
        groups = node.generator.generate(prompts, node.config.generation.group_size, node.sampling, seed=3)
        tokenizer = node.policy.tokenizer
        right, total = [], 0
        for problem, group in zip(problems, groups, strict=True):
            texts = tokenizer.batch_decode([c.token_ids.tolist() for c in group], skip_special_tokens=True)
            for completion, text in zip(group, texts, strict=True):
                total += 1
                every.setdefault(label, []).append((problem, text, completion.finish_reason))
                if node.task.reward(text, problem.answer) > 0:
                    right.append((problem, text, completion.finish_reason))
        samples[label] = right
        print(
            f"{name}: {label} right in {len(right)} of {total} samples ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    payloads = payload_texts(problems) if name == "tags" else {}
    for label, node in nodes.items():
        other = next(peer for peer in nodes if peer != label)
        retokenizer = Retokenizer.for_node(
            node.policy.tokenizer, node.prompter.chat, node.config.generation.max_new_tokens, node.prompter,
            node.config.generation.stop,
        )

        def row(text: str, finish: str, retokenizer=retokenizer) -> np.ndarray:
            text, own_stop = retokenizer.until_stop(text)
            ids = retokenizer.tokens(text)
            end = finish == "stop" and not own_stop and retokenizer.end_id is not None
            return np.asarray([*ids, retokenizer.end_id] if end else ids, np.int64)

        kinds = {
            "own right answers": [(p, row(t, f)) for p, t, f in samples[label]],
            f"{other}'s right answers": [(p, row(t, f)) for p, t, f in samples[other]],
            f"{other}'s samples, all": [(p, row(t, f)) for p, t, f in every[other]],
        }
        for kind, texts in payloads.items():
            kinds[f"payload {kind}"] = [(p, row(t, "stop")) for p, t in zip(problems, texts, strict=True)]
        print(f"{name}: receiver {label} ({node.policy.tokenizer.__class__.__name__})")
        report(
            {
                kind: [own_logprobs(node.policy.model, node.prompter.ids(p), ids) for p, ids in rows if len(ids)]
                for kind, rows in kinds.items()
            },
            windows,
        )
    for node in nodes.values():
        node.transport.close()


if __name__ == "__main__":
    main()
