"""``ftis-node join``: build a node from its config and run rounds until stopped.

The model, the task and the generator are built here; the transport is the hivemind one unless the
caller passes another (tests and demos pass a ``MemoryTransport``). Ctrl-C or SIGTERM end the loop
between rounds' operations; the transport is always closed (DHT and ``p2pd`` shut down).
"""

from collections.abc import Callable
from pathlib import Path

from ftis.node.config import NodeConfig
from ftis.node.runner.metrics import MetricsLog, summary_line
from ftis.node.runner.node import Node
from ftis.node.swarm.transport import Transport


def build_node(config: NodeConfig, transport_factory: Callable[[str], Transport] | None = None) -> Node:
    """The node ``config`` describes; ``transport_factory(tokenizer_fingerprint)`` makes its transport
    (default: join the hivemind swarm)."""
    from ftis.node.generation.hf import TransformersGenerator
    from ftis.node.models import load_policy
    from ftis.node.tasks import make_task

    m = config.model
    policy = load_policy(m.name, adapter=m.adapter, lora_rank=m.lora_rank, lora_alpha=m.lora_alpha,
                         lora_target_modules=m.lora_target_modules, dtype=m.dtype, device=m.device, seed=m.seed,
                         revision=m.revision)
    settings: dict[str, object] = dict(config.task.arithmetic) if config.task.name == "arithmetic" else {}
    if config.task.data_files:
        settings["data_files"] = dict(config.task.data_files)
    task = make_task(config.task.name, **settings)
    generator = TransformersGenerator(policy.model, eos_token_ids=policy.tokenizer.eos_token_id,
                                      pad_token_id=policy.tokenizer.pad_token_id,
                                      batch_size=config.generation.batch_size)
    if transport_factory is None:
        from ftis.node.swarm.hivemind_transport import HivemindTransport

        def transport_factory(fingerprint: str) -> Transport:
            return HivemindTransport(config.swarm, fingerprint)

    transport = transport_factory(policy.fingerprint)
    return Node(config, policy, task, generator, transport)


def run_node(node: Node, rounds: int | None, out: Path, echo: Callable[[str], None]) -> None:
    """Run ``rounds`` rounds (None: until Ctrl-C or SIGTERM), writing into the node's folder ``out``;
    always closes the transport."""
    log = MetricsLog(out)
    echo(f"node {node.transport.peer_id} ({node.policy.name}, {node.policy.adapter}) in run "
         f"{node.config.swarm.run_id!r}; metrics in {log.path}")
    try:
        done = 0
        while rounds is None or done < rounds:
            report = node.run_round()
            log.write(report)
            echo(summary_line(report))
            done += 1
    finally:
        log.close()
        node.transport.close()
