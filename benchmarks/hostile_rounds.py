"""Hostile peers against a node in rounds mode, replayed: what each costs the node and what it is charged.

Run (from the repo root):  python -m benchmarks.hostile_rounds [--attacks NAME,...] [--rounds N]

Each attack gets a fresh node as ``ftis-node join`` builds one (``runner/join.build_node``: the default settings,
``tiny-small``, arithmetic in the tags format, the inbox limits join sets, ``loop.mode = "rounds"`` with a 1 s
deadline), on the in-memory transport, with the peers the attack needs:

- ``far-ahead``: an honest peer in step with the node, and Mallory, who publishes at every round a batch of
  4 groups × 128 completions × 8,192 tokens (~47 MiB once decoded) numbered a million rounds ahead. Printed per
  round: the node's round, the bytes its inbox charges for peers' batches, the batches held for later rounds
  (in the inbox's queue, or beside it), and the process's RSS growth since the first round.
- ``lone-claim``: Mallory alone, in step with the node for 3 rounds, then claims round 2**40 - 1. Printed: the
  node's round after each of its rounds.
- ``withholding``: Mallory delivers one round in three (rounds 0, 3, 6...). Printed per round: the seconds the
  node waited, Mallory's score and whether it is muted; at the end, the rounds that waited the full deadline.
"""

import argparse
import gc
import time
from collections.abc import Callable

import numpy as np
import psutil
import torch

from ftis.node.config import NodeConfig
from ftis.node.runner.join import build_node
from ftis.node.runner.node import Node
from ftis.node.swarm.exchange.limits import inbox_limits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo
from ftis.protocol.limits import MAX_ROUND

DEADLINE_S = 1.0
SETTINGS = {"model": {"name": "tiny-small"}, "task": {"name": "arithmetic", "arithmetic": {"format": "tags"}},
            "loop": {"mode": "rounds", "round_deadline_s": DEADLINE_S}}
FAR = 1_000_000  # how far ahead the far-ahead batches are numbered


def joined_node(hub: MemoryHub, peer_id: str, **sections: dict) -> Node:
    config = NodeConfig.model_validate({**SETTINGS, **sections})
    return build_node(config, lambda fingerprint: MemoryTransport(hub, config.swarm.run_id, peer_id, fingerprint,
                                                                  inbox_limits(config.swarm)))


def mallory_batch(node: Node, round_: int, groups: int, completions: int, tokens: int) -> RolloutBatch:
    """A batch on the node's problems, in its tokens, every completion ``tokens`` long."""
    made = []
    for k in range(groups):
        problem = node.task.problem(node.config.task.split, 10_000 + k)
        ids = np.full(tokens, 16, np.int64)
        made.append(Group(f"mallory/{round_}/{k}", TaskRef(problem.dataset, problem.split, problem.index,
                                                            problem.answer),
                          node.prompter.ids(problem),
                          tuple(Completion(ids, np.full(tokens, -1.0, np.float32), float(c % 2), "length", None)
                                for c in range(completions))))
    return RolloutBatch(node.config.swarm.run_id, "mallory", round_, time.time(), PolicyInfo("hostile", "", "full", 0),
                        TokenizerInfo(node.policy.fingerprint, len(node.policy.tokenizer)),
                        SamplingSettings(1.0, 1.0, 0, tokens), tuple(made))


def charged(node: Node) -> int:
    """Bytes the node's inbox charges for its peers' batches (in flight or queued)."""
    return sum(node.transport._inbox._pending.values())


def held(node: Node) -> int:
    """Batches of later rounds held: in the inbox's queue (rounds after the node's), or beside it."""
    queue = [item for item in node.transport._inbox._queue if item.batch.round > node.round]
    later = getattr(node.intake._barrier, "later", ())
    return len(queue) + len(later)


def far_ahead(rounds: int) -> None:
    hub = MemoryHub()
    node = joined_node(hub, "node")
    honest = joined_node(hub, "honest", loop={"mode": "async"})
    mallory = MemoryTransport(hub, node.config.swarm.run_id, "mallory", node.policy.fingerprint,
                              inbox_limits(node.config.swarm))
    process = psutil.Process()
    start = None
    print(f"{'round':>6} {'node round':>11} {'charged MiB':>12} {'held':>5} {'RSS +MiB':>9}")
    for k in range(rounds):
        honest.round = node.round
        honest.run_round()
        batch = mallory_batch(node, FAR + k, 4, 128, 8192)
        mallory.publish(batch)
        del batch
        node.run_round()
        gc.collect()
        rss = process.memory_info().rss
        start = rss if start is None else start
        print(f"{k:>6} {node.round:>11} {charged(node) / 2**20:>12.1f} {held(node):>5} {(rss - start) / 2**20:>9.1f}",
              flush=True)
    print(f"mallory charged: {_charges(node)}")


def lone_claim(rounds: int) -> None:
    hub = MemoryHub()
    node = joined_node(hub, "node")
    mallory = joined_node(hub, "mallory", loop={"mode": "async"})
    for k in range(rounds):
        if k <= 3:  # in step, then the claim (a batch of the last round there is: it publishes no more)
            mallory.round = node.round if k < 3 else MAX_ROUND
            mallory.run_round()
        node.run_round()
        print(f"round {k}: mallory's last batch is of round {mallory.round - 1}; the node's next round: {node.round}",
              flush=True)


def withholding(rounds: int) -> None:
    hub = MemoryHub()
    node = joined_node(hub, "node")
    mallory = joined_node(hub, "mallory", loop={"mode": "async"})
    full = 0
    for k in range(rounds):
        if k % 3 == 0:
            mallory.round = node.round
            mallory.run_round()
        report = node.run_round()
        full += report.waited_seconds >= DEADLINE_S
        score = node.transport.scores().get("mallory")
        print(f"round {k:>2}: waited {report.waited_seconds:5.2f} s, mallory's score "
              f"{score.score if score else 1.0:.2f}{', muted' if score and score.muted_until else ''}", flush=True)
    print(f"rounds that waited the full deadline: {full} of {rounds}; mallory charged: {_charges(node)}")


def _charges(node: Node) -> dict[str, int]:
    return {reason: count for (who, reason), count in node.transport.stats().rejections.items() if who == "mallory"}


ATTACKS: dict[str, Callable[[int], None]] = {"far-ahead": far_ahead, "lone-claim": lone_claim,
                                             "withholding": withholding}
ROUNDS = {"far-ahead": 6, "lone-claim": 5, "withholding": 12}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, of: " + ", ".join(ATTACKS))
    parser.add_argument("--rounds", type=int, default=0, help="rounds per attack (0: 6, 5 and 12)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.attacks.split(","):
        print(f"--- {name}", flush=True)
        ATTACKS[name](args.rounds or ROUNDS[name])


if __name__ == "__main__":
    main()
