"""Does GRPO through the node's own code make the demo's models better? Solo runs over several seeds.

Run (from the repo root):  python -m benchmarks.learning [--seeds 0 1 2] [--rounds 150] [--nodes small,...]
    [--eval-every 10] [--eval-problems 500] [--supervised-control STEPS] [--set KEY=VALUE ...] [--jobs 2]
    [--demo-config FILE] [--json FILE] [--quick | --real]
--demo-config: the nodes of another demo settings file (default: the packaged demo's tiny models);
--real: the real-model demo's SmolLM2 (``examples/demo-real.toml``, after ``models fetch --all``), 3 seeds of 30
rounds, 300 problems evaluated every 10 rounds, one run at a time with both cores, goal ≥ 10 points in 30 rounds;
--nodes: some of the demo's nodes by name (default all); --set: a node setting over the demo's, as a dotted
path into the node config (``--set trainer.learning_rate=3e-4``, ``--set generation.temperature=1.2``),
for trying another regime with the rest unchanged; --supervised-control: also continue each warm start
with that many more supervised steps (its own recipe, constant learning rate) and evaluate it, the "any
further training" control; --jobs: processes at once (default 2: one per core, one torch thread each);
--quick: one seed, 20 rounds, 100 problems, the small node.

Method: every run is one demo node alone, exactly as ``ftis-node demo`` configures it (its packaged
``config.toml``: task, warm-up recipe, generation, trainer), with ``[model] seed`` set to the run's seed,
so each seed has its own warm start (trained once, then cached like the demo's) and its own sampling.
The node is the real one (``build_node``, ``Node.run_round``) on an in-memory transport with no peer:
plain GRPO on its own groups, as the demo's solo baseline. Evaluation: greedy accuracy on the same
``--eval-problems`` distinct held-out test problems before round 0, every ``--eval-every`` rounds and after
the last (``evaluation/evaluation.py``), with the carry / no-carry split. Sampling accuracy is the mean
reward of the node's own completions, averaged over each block of 10 rounds.

Figures: per node, held-out accuracy at the start and at the end and the gain, as mean ± standard error
over seeds (the standard error of a mean of n values: sample standard deviation / sqrt(n)), the carry
and no-carry accuracy likewise, and sampling accuracy per 10 rounds (mean over seeds).
Goal (docs/learning.md): every demo node gains ≥ 10 points on average within 150 rounds.
"""

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

GOAL_POINTS = 10.0  # mean held-out gain each node must reach...
GOAL_ROUNDS = 150  # ...within this many rounds (the tiny demo's nodes)
REAL_DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo-real.toml"
REAL_NODE, REAL_ROUNDS, REAL_PROBLEMS = "smollm2", 30, 300  # --real: the real demo's full fine-tuning node


@dataclass(frozen=True)
class Job:
    node: str
    seed: int
    rounds: int
    eval_every: int
    eval_problems: int
    overrides: tuple[tuple[str, Any], ...]
    supervised_control: int
    demo_config: str | None = None  # the demo settings file whose node this is (None: the packaged demo)
    threads: int = 1  # torch threads of the run


def node_config(name: str, seed: int, overrides: tuple[tuple[str, Any], ...] = (), demo_config: str | None = None):
    """The demo node ``name`` as the demo config (default: the packaged one) makes it, at ``seed``, with
    ``overrides`` laid over."""
    from ftis.node.config import NodeConfig
    from ftis.node.demo.settings import load_demo_config

    settings = load_demo_config(demo_config).node_settings()
    if name not in settings:
        raise SystemExit(f"unknown node {name!r}; the demo has {', '.join(settings)}")
    values = settings[name]
    values.setdefault("model", {})["seed"] = seed
    values.setdefault("swarm", {})["run_id"] = f"learning-{name}-{seed}"
    values["loop"] = {**values.get("loop", {}), "mode": "async", "min_peers": 0}  # alone: wait for nobody
    for path, value in overrides:
        *parents, leaf = path.split(".")
        table = values
        for key in parents:
            table = table.setdefault(key, {})
        table[leaf] = value
    return NodeConfig.model_validate(values)


def run_job(job: Job) -> dict[str, Any]:
    """One solo run: the record of its evaluations and its per-round sampling accuracy."""
    import torch

    from ftis.node.evaluation.evaluation import evaluate
    from ftis.node.experiment.lockstep import LockstepSwarm
    from ftis.node.runner.join import build_node

    torch.set_num_threads(job.threads)
    config = node_config(job.node, job.seed, job.overrides, job.demo_config)
    swarm = LockstepSwarm(1, config.swarm)
    node = build_node(config, transport_factory=lambda fingerprint: swarm.transport(job.node, fingerprint))
    max_new = config.generation.max_new_tokens

    def evaluated(done: int) -> dict[str, Any]:
        result = evaluate(node.policy, node.task, "test", limit=job.eval_problems, max_new_tokens=max_new,
                          batch_size=256, prompter=node.prompter, stop=node.stop)
        return {"round": done, "accuracy": result.accuracy, "standard_error": result.standard_error,
                **{skill: result.skill_accuracy(skill) for skill in result.by_skill}}

    started = time.perf_counter()
    evaluations, rewards = [evaluated(0)], []
    try:
        for done in range(1, job.rounds + 1):
            rewards.append(node.run_round().own_reward)
            if done % job.eval_every == 0 or done == job.rounds:
                evaluations.append(evaluated(done))
    finally:
        node.transport.close()
    record = {"node": job.node, "seed": job.seed, "evaluations": evaluations, "own_reward": rewards,
              "seconds": time.perf_counter() - started}
    if job.supervised_control:
        record["supervised_control"] = supervised_control(config, job)
    return record


def supervised_control(config, job: Job) -> dict[str, Any]:
    """The warm start trained ``job.supervised_control`` more supervised steps (its own recipe, constant
    learning rate, no stop), then evaluated like the GRPO runs: what further training alone would give."""
    from dataclasses import replace

    from ftis.node.evaluation.evaluation import evaluate
    from ftis.node.tasks import ArithmeticTask, build_task
    from ftis.node.warmup import load_warm_policy, supervised_warmup, warmup_spec

    policy = load_warm_policy(config.model, config.task)
    spec = warmup_spec(config.model, config.task)
    plan = replace(spec.plan, steps=job.supervised_control, schedule="constant", stop_accuracy=None)
    supervised_warmup(policy, ArithmeticTask(spec.data), plan, seed=spec.seed + 10_000)
    result = evaluate(policy, build_task(config.task), "test", limit=job.eval_problems,
                      max_new_tokens=config.generation.max_new_tokens, batch_size=256)
    return {"steps": job.supervised_control, "accuracy": result.accuracy,
            **{skill: result.skill_accuracy(skill) for skill in result.by_skill}}


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n); 0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n)


def points(values: list[float]) -> str:
    mean, se = mean_se([100 * v for v in values])
    return f"{mean:5.1f} ± {se:3.1f}"


def summarize(records: list[dict[str, Any]], echo=print, goal_rounds: int = GOAL_ROUNDS) -> dict[str, dict[str, float]]:
    """Print the figures of the module docstring; return each node's mean start, end and gain (points)."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_node.setdefault(record["node"], []).append(record)
    figures = {}
    for name, runs in by_node.items():
        first = [run["evaluations"][0] for run in runs]
        last = [run["evaluations"][-1] for run in runs]
        gains = [b["accuracy"] - a["accuracy"] for a, b in zip(first, last, strict=True)]
        echo(f"{name}: {len(runs)} seeds, {last[0]['round']} rounds; held-out accuracy (points, mean ± SE over seeds; "
             f"one evaluation's own SE ~{100 * first[0]['standard_error']:.1f})")
        echo(f"  start {points([e['accuracy'] for e in first])}  end {points([e['accuracy'] for e in last])}  "
             f"gain {points(gains)}  (per seed: {', '.join(f'{100 * g:+.1f}' for g in gains)})")
        for skill in ("carry", "no-carry"):
            if skill in first[0]:
                echo(f"  {skill:9s} start {points([e[skill] for e in first])}  end {points([e[skill] for e in last])}")
        if all("supervised_control" in run for run in runs):
            control = [run["supervised_control"] for run in runs]
            echo(f"  supervised control (+{control[0]['steps']} steps): {points([c['accuracy'] for c in control])}")
        blocks = len(runs[0]["own_reward"]) // 10
        curve = [mean_se([sum(run["own_reward"][10 * b: 10 * b + 10]) / 10 for run in runs])[0] for b in range(blocks)]
        echo("  sampling accuracy per 10 rounds: " + " ".join(f"{100 * value:.0f}" for value in curve))
        mean_gain = mean_se(gains)[0]
        figures[name] = {"start": mean_se([e["accuracy"] for e in first])[0],
                         "end": mean_se([e["accuracy"] for e in last])[0], "gain": mean_gain}
        rounds = last[0]["round"]
        if rounds < goal_rounds:
            echo(f"  goal ≥ {GOAL_POINTS:.0f} points within {goal_rounds} rounds: not judged on {rounds} rounds")
        else:
            verdict = "met" if 100 * mean_gain >= GOAL_POINTS else "MISSED"
            echo(f"  goal ≥ {GOAL_POINTS:.0f} points within {goal_rounds} rounds: {verdict} ({100 * mean_gain:+.1f})")
    return figures


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--nodes", default="", help="comma-separated demo node names (default: all)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--supervised-control", type=int, default=0, metavar="STEPS")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--demo-config", default=None, metavar="FILE")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_true")
    modes.add_argument("--real", action="store_true")
    args = parser.parse_args(argv)
    goal_rounds, threads = GOAL_ROUNDS, 1
    if args.quick:
        args.seeds, args.rounds, args.eval_problems, args.nodes = [0], 20, 100, args.nodes or "small"
    if args.real:  # both cores for one run: a real model's step is mostly large matrix products
        args.demo_config, args.nodes, args.jobs, threads = str(REAL_DEMO), args.nodes or REAL_NODE, 1, 2
        args.rounds, args.eval_problems, goal_rounds = REAL_ROUNDS, REAL_PROBLEMS, REAL_ROUNDS
    from ftis.node.demo.settings import load_demo_config

    names = [n for n in args.nodes.split(",") if n] or list(load_demo_config(args.demo_config).nodes)
    overrides = tuple((key, parse_value(value)) for key, value in (item.split("=", 1) for item in args.overrides))
    jobs = [Job(name, seed, args.rounds, args.eval_every, args.eval_problems, overrides, args.supervised_control,
                args.demo_config, threads)
            for seed in args.seeds for name in names]
    print(f"benchmarks.learning: {len(jobs)} solo runs ({', '.join(names)} × seeds {args.seeds}), {args.rounds} rounds"
          + (f", overrides {dict(overrides)}" if overrides else ""), flush=True)
    started = time.perf_counter()
    records = []
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        for record in pool.map(run_job, jobs):
            e0, e1 = record["evaluations"][0], record["evaluations"][-1]
            print(f"  {record['node']} seed {record['seed']}: {100 * e0['accuracy']:.1f} -> {100 * e1['accuracy']:.1f} "
                  f"in {record['seconds']:.0f} s", flush=True)
            records.append(record)
    print(f"all runs in {time.perf_counter() - started:.0f} s")
    summarize(records, goal_rounds=goal_rounds)
    if args.json is not None:
        args.json.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
