"""Hostile batches against a node's intake and step, replayed: what each costs a node and what it is charged.

Run (from the repo root):  python -m benchmarks.hostile_batches [--attacks NAME,...]

Each attack gets a fresh node as ``ftis-node join`` builds one (``runner/join.build_node``: the default settings,
``tiny-small``, arithmetic in the tags format, the inbox limits join sets), on the in-memory transport. The node runs
one round alone (so its memory has settled), a hostile peer publishes the attack's batch, and the node runs two
rounds. Printed per attack: whether both rounds ran, the process's RSS growth over them (MB), the largest forward
pass the trainer ran with gradients (tokens, padding included: the decoder's calls, ``trainer/logprobs.py``)
against ``max_tokens_per_microbatch``, the step's seconds, and what the peer was charged (rejections by reason).

The attacks (the batch's size on the wire in brackets):
- ``long-number-texts``: another tokenizer's group whose texts answer with a 5,000-digit number (Python's int
  limit is 4,300 digits): read as no number, reward 0;
- ``long-number-ids``: the same in this node's tokens: 5,000 digit tokens, longer than the node samples;
- ``long-completions``: 128 completions of 8,192 tokens in this node's tokens;
- ``many-long``: 16 completions of 1,024 tokens;
- ``wide-group``: one group of 128 completions as long as the node samples (each row fits a pass, the group not);
- ``flood``: 16 batches of 256 groups of 8 from one peer.
"""

import argparse
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import psutil
import torch

from ftis.node.config import NodeConfig
from ftis.node.intake.text_groups import usable_text_bytes
from ftis.node.runner.join import build_node
from ftis.node.runner.node import Node
from ftis.node.swarm.exchange.limits import inbox_limits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.tasks import Problem
from ftis.node.trainer.logprobs import output_layer
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo, encode

OTHER_FINGERPRINT = "sha256:another-tokenizer"
SETTINGS = {"model": {"name": "tiny-small"}, "task": {"name": "arithmetic", "arithmetic": {"format": "tags"}}}


@dataclass(frozen=True)
class Outcome:
    attack: str
    wire_bytes: int
    rounds_ran: bool
    rss_growth_mb: float
    largest_pass: int
    bound: int
    step_seconds: float
    charged: dict[str, int]


def attack_node(hub: MemoryHub) -> Node:
    config = NodeConfig.model_validate(SETTINGS)
    limits = replace(inbox_limits(config.swarm), max_text_bytes=usable_text_bytes(config.generation.max_new_tokens))
    return build_node(config, lambda fingerprint: MemoryTransport(hub, config.swarm.run_id, "node", fingerprint,
                                                                  limits))


Completions = Callable[[Problem], list[np.ndarray]]  # a group's completions, in ids, for the problem it answers


def hostile_batch(node: Node, peer_id: str, completions: Completions, *, texts: list[str] | None = None,
                  groups: int = 1, round_: int = 0) -> RolloutBatch:
    """``groups`` groups on the node's own training problems with its own prompts, of ``completions``; in another
    tokenizer's ids with ``texts``."""
    made = []
    for k in range(groups):
        problem = node.task.problem(node.config.task.split, 10_000 + k)
        made.append(Group(f"{peer_id}/{round_}/{k}", TaskRef(problem.dataset, problem.split, problem.index,
                                                              problem.answer),
                          node.prompter.ids(problem),
                          tuple(Completion(ids, np.full(len(ids), -1.0, np.float32), 0.0, "length",
                                           None if texts is None else texts[c])
                                for c, ids in enumerate(completions(problem)))))
    longest = max(len(c.token_ids) for group in made for c in group.completions)
    fingerprint, vocab = ((node.policy.fingerprint, len(node.policy.tokenizer)) if texts is None
                          else (OTHER_FINGERPRINT, 1000))
    return RolloutBatch(node.config.swarm.run_id, peer_id, round_, time.time(), PolicyInfo("hostile", "", "full", 0),
                        TokenizerInfo(fingerprint, vocab), SamplingSettings(1.0, 1.0, 0, longest), tuple(made))


def answers(node: Node, count: int, length: int) -> Completions:
    """``count`` completions of ``length`` tokens in the tags format, every other one right (reward 1): rewards
    that vary, so the group is trained on whenever it is admitted."""
    tokenizer = node.policy.tokenizer

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def made(problem: Problem) -> list[np.ndarray]:
        rows = []
        for c in range(count):
            tail = ids(f" </think> <answer> {problem.answer if c % 2 else 'x'} </answer>")
            head = ids("<think>")
            room = max(length - len(head) - len(tail), 0)
            filler = (ids(" 1") * room)[:room]
            rows.append(np.asarray((head + filler + tail)[-length:] if len(head + tail) > length
                                   else head + filler + tail, np.int64))
        return rows

    return made


def long_number_texts(node: Node) -> list[RolloutBatch]:
    number = "9" * 5000
    texts = [f"<think> {k} </think> <answer> {number if k % 2 else k} </answer>" for k in range(8)]
    return [hostile_batch(node, "mallory", lambda problem: [np.arange(1, 101) for _ in texts], texts=texts)]


def long_number_ids(node: Node) -> list[RolloutBatch]:
    tokenizer = node.policy.tokenizer
    ids = tokenizer(f"<think> 1 </think> <answer> {'9' * 5000} </answer>", add_special_tokens=False)["input_ids"]
    return [hostile_batch(node, "mallory", lambda problem: [np.asarray(ids, np.int64)] * 8)]


def long_completions(node: Node) -> list[RolloutBatch]:
    return [hostile_batch(node, "mallory", answers(node, 128, 8192))]


def many_long(node: Node) -> list[RolloutBatch]:
    return [hostile_batch(node, "mallory", answers(node, 16, 1024))]


def wide_group(node: Node) -> list[RolloutBatch]:
    return [hostile_batch(node, "mallory", answers(node, 128, node.config.generation.max_new_tokens))]


def flood(node: Node) -> list[RolloutBatch]:
    return [hostile_batch(node, "mallory", answers(node, 8, 16), groups=256, round_=r) for r in range(16)]


ATTACKS: dict[str, Callable[[Node], list[RolloutBatch]]] = {
    "long-number-texts": long_number_texts, "long-number-ids": long_number_ids,
    "long-completions": long_completions, "many-long": many_long, "wide-group": wide_group, "flood": flood,
}


def replay(name: str) -> Outcome:
    hub = MemoryHub()
    node = attack_node(hub)
    passes: list[int] = []

    def count(module, args, kwargs) -> None:
        if torch.is_grad_enabled():
            ids = kwargs.get("input_ids", args[0] if args else None)
            passes.append(int(ids.numel()))

    output_layer(node.policy.model).decoder.register_forward_pre_hook(count, with_kwargs=True)
    node.run_round()
    batches = ATTACKS[name](node)
    peer = MemoryTransport(hub, node.config.swarm.run_id, "mallory", batches[0].tokenizer.fingerprint,
                           inbox_limits(node.config.swarm))
    wire = sum(len(encode(batch)) for batch in batches)
    for batch in batches:
        peer.publish(batch)
    del batches
    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    passes.clear()
    ran, seconds = True, 0.0
    try:
        for _ in range(2):
            seconds = max(seconds, node.run_round().step.seconds)
    except Exception as error:  # an escape: the node would have died
        print(f"  {name}: escaped: {type(error).__name__}: {str(error)[:200]}")
        ran = False
    gc.collect()
    growth = (process.memory_info().rss - before) / 2**20
    charged = {reason: count for (who, reason), count in node.transport.stats().rejections.items() if who == "mallory"}
    node.transport.close()
    return Outcome(name, wire, ran, growth, max(passes, default=0), node.config.trainer.max_tokens_per_microbatch,
                   seconds, charged)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, of: " + ", ".join(ATTACKS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'attack':<18} {'wire B':>8} {'ran':>4} {'RSS +MB':>8} {'pass':>6} {'bound':>6} {'step s':>7}  charged")
    for name in args.attacks.split(","):
        o = replay(name)
        print(f"{o.attack:<18} {o.wire_bytes:>8} {'yes' if o.rounds_ran else 'NO':>4} {o.rss_growth_mb:>8.1f} "
              f"{o.largest_pass:>6} {o.bound:>6} {o.step_seconds:>7.2f}  {o.charged}", flush=True)


if __name__ == "__main__":
    main()
