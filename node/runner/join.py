"""``ftis-node join``: the node's settings from its options and config (``JoinRequest``, ``join``), the node built
from them, and its rounds run until stopped.

The model, the task and the generator are built here; the transport is the hivemind one unless the
caller passes another (tests and demos pass a ``MemoryTransport``). Ctrl-C or SIGTERM end the loop
between rounds' operations; the last completed round is checkpointed and the model exported (``checkpointer.py``),
and the transport is always closed (DHT and ``p2pd`` shut down).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ftis.node.config import NodeConfig, load_config, validated
from ftis.node.evaluation.evaluation import EvalResult
from ftis.node.evaluation.periodic_eval import PeriodicEval
from ftis.node.models.catalog import CATALOG, Prompting
from ftis.node.records.metrics import RunMetrics
from ftis.node.records.round_report import rejections_by_peer
from ftis.node.records.utilisation import LoopClock
from ftis.node.runner.alone import Alone
from ftis.node.runner.checkpoint_files import latest_config
from ftis.node.runner.checkpointer import CHECKPOINTS, Checkpointer
from ftis.node.runner.folders import check_node_folders
from ftis.node.runner.helper_threads import HelperThreads
from ftis.node.runner.mutes import MuteWatch
from ftis.node.runner.node import Node
from ftis.node.swarm.transport import Transport
from ftis.node.tasks import build_task
from ftis.node.tasks.prompts import policy_prompter
from ftis.node.trainer.loss_params import loss_params


@dataclass(frozen=True)
class JoinRequest:
    """``ftis-node join``'s options as given (None: unset, from ``config`` or the defaults)."""

    out: Path
    peer: list[str] | None = None
    config: Path | None = None
    model: str | None = None
    adapter: str | None = None
    lora_rank: int | None = None
    lora_alpha: float | None = None
    task: str | None = None
    run_id: str | None = None
    identity: Path | None = None
    host_maddrs: list[str] | None = None
    announce_maddrs: list[str] | None = None
    backend: str | None = None
    display: str | None = None
    rounds: int | None = None
    resume: bool = False


def join_config(request: JoinRequest) -> NodeConfig:
    """The node's settings: the config file (with ``resume`` and none given, the one the newest checkpoint
    recorded), the options over it; ``ConfigError`` for a value that does not validate."""
    if request.config is not None:
        base = load_config(request.config)
    elif request.resume:
        base = checkpoint_config(request.out)
    else:
        base = NodeConfig()
    overrides = {
        "model": {"name": request.model, "adapter": request.adapter, "lora_rank": request.lora_rank,
                  "lora_alpha": request.lora_alpha},
        "task": {"name": request.task},
        "swarm": {"initial_peers": request.peer, "run_id": request.run_id, "identity_path": request.identity,
                  "host_maddrs": request.host_maddrs, "announce_maddrs": request.announce_maddrs},
        "generation": {"backend": request.backend},
        "metrics": {"display": request.display},
    }
    data = base.model_dump()
    for section, values in overrides.items():
        data[section].update({key: value for key, value in values.items() if value is not None})
    config = validated(NodeConfig, data)
    if request.config is None and not request.resume:  # no file of the user's: a known model's own prompt settings
        config = known_model_prompting(config)[0]
    return config


def known_model_prompting(config: NodeConfig) -> tuple[NodeConfig, Prompting | None]:
    """``config`` with the prompt settings a known real model needs on its task (``models/catalog.py``: solved
    examples, chat template, stop strings, new tokens), and those settings; ``config`` itself and None for another
    model or a task the catalog has none for."""
    known = CATALOG.get(config.model.name)
    if known is None or Path(config.model.name).expanduser().exists():  # a folder of that name is the user's
        return config, None
    prompting = known.prompting_for(config.task.name, build_task(config.task).answer_format)
    if prompting is None:
        return config, None
    data = config.model_dump()
    data["task"]["few_shot"] = prompting.few_shot
    data["model"]["chat_template"] = prompting.chat_template
    data["generation"].update(stop=list(prompting.stop), max_new_tokens=prompting.max_new_tokens)
    return validated(NodeConfig, data), prompting


def checkpoint_config(out: Path) -> NodeConfig:
    """The config the newest checkpoint in the node folder ``out`` recorded (defaults when there is none)."""
    saved = latest_config(out / CHECKPOINTS)
    return NodeConfig() if saved is None else validated(NodeConfig, saved)


def join(request: JoinRequest, echo: Callable[[str], None]) -> None:
    """``ftis-node join``: the settings, the node's folders checked (before minutes of warm start and start-up),
    the node built, its rounds run until ``request.rounds`` or a stop."""
    config = join_config(request)
    if request.config is None and not request.resume and (prompting := known_model_prompting(config)[1]):
        echo(f"{config.model.name} on {config.task.name}: {prompting.describe()} (a --config chooses others)")
    check_node_folders(request.out, config.swarm.identity_path)
    node = build_node(config, echo=echo)
    run_node(node, request.rounds, request.out, echo, resume=request.resume)


def build_node(config: NodeConfig, transport_factory: Callable[[str], Transport] | None = None,
               echo: Callable[[str], None] | None = None) -> Node:
    """The node ``config`` describes; ``transport_factory(tokenizer_fingerprint)`` makes its transport
    (default: join the hivemind swarm). With ``[model.warmup] steps`` the policy starts from the cached (or
    now trained) warm start; ``echo`` gets its progress and cache path."""
    from ftis.node.generation import make_generator
    from ftis.node.models import load_policy

    m = config.model
    if m.warmup.steps:
        from ftis.node.warmup import load_warm_policy

        policy = load_warm_policy(m, config.task, echo)
    else:
        policy = load_policy(m.name, adapter=m.adapter, lora_rank=m.lora_rank, lora_alpha=m.lora_alpha,
                             lora_target_modules=m.lora_target_modules, dtype=m.dtype, device=m.device,
                             seed=m.seed, revision=m.revision)
    task = build_task(config.task)
    # a prompt setting this model or task cannot take fails here, before the swarm is joined
    policy_prompter(policy, task, chat_template=m.chat_template, bos=m.bos, few_shot=config.task.few_shot)
    if echo is not None and (config.generation.top_p < 1 or config.generation.top_k > 0):
        echo(f"note: top_p {config.generation.top_p:g} / top_k {config.generation.top_k}: the sampler draws from a "
             "truncation of the policy being trained, so this node's own samples are off-policy too (their IS "
             "weights fall below 1; see docs/loss.md)")
    # vLLM's engine starts now, on the trainer's GPU, from the policy's current weights
    generator = make_generator(config.generation.backend, policy, config.generation, seed=m.seed)
    if transport_factory is None:
        from ftis.node.intake.text_groups import usable_text_bytes
        from ftis.node.swarm.dht.transport import HivemindTransport
        from ftis.node.swarm.reach.reachability import describe as describe_reachability
        from ftis.node.swarm.reach.reachability import reach_settings

        def transport_factory(fingerprint: str) -> Transport:
            transport = HivemindTransport(config.swarm, fingerprint,
                                          max_text_bytes=usable_text_bytes(config.generation.max_new_tokens))
            # Any member is an entry point, so the swarm outlives its bootstrap; a client-mode node accepts
            # no connections (and hivemind has no addresses to give for it).
            if echo is not None:
                for line in [*describe_reachability(reach_settings(config.swarm)), config.swarm.sampling_line()]:
                    echo(line)
            if echo is not None and not config.swarm.client_mode:
                echo("others can join through this node too:")
                for maddr in transport.visible_maddrs:
                    echo(f"  ftis-node join --peer {maddr}")
            return transport

    transport = transport_factory(policy.fingerprint)
    try:
        return Node(config, policy, task, generator, transport)
    except BaseException:
        transport.close()
        raise


def run_node(node: Node, rounds: int | None, out: Path, echo: Callable[[str], None], resume: bool = False) -> None:
    """Run ``rounds`` rounds (None: until Ctrl-C or SIGTERM), writing into the node's folder ``out``
    (``resume``: continuing from its latest checkpoint); always checkpoints the last completed round and
    closes the transport."""
    metrics = RunMetrics(out, node.config.metrics, echo, directory=node.config.swarm.sampling_line())
    echo(f"node {node.transport.peer_id} ({node.policy.name}, {node.policy.adapter}) in run "
         f"{node.config.swarm.run_id!r}; metrics in {metrics.log.path}")
    checkpointer = Checkpointer(node, out, echo)
    helpers = HelperThreads()  # publishing and decoding peers' batches overlap generating and training
    try:
        checkpointer.start(resume)
        evaluation = PeriodicEval(node, echo)
        clock = LoopClock()  # each round's share of the wall time, and what took it (records/utilisation.py)
        evaluated: EvalResult | None = None

        def evaluate() -> None:  # inside the round, with the weights it generated with (Node.run_round)
            nonlocal evaluated
            evaluated = evaluation.run_if_due(node, metrics.log)

        alone = Alone()  # a node cut off from the swarm says so, loudly
        mutes = MuteWatch()  # ...and each mute, with its likely reason
        done = 0
        while rounds is None or done < rounds:
            evaluated = None
            report = node.run_round(evaluate, helpers)
            lap = clock.lap(report.seconds)
            peers = len([m for m in node.transport.members() if m.peer_id != node.transport.peer_id])
            if (warning := alone.check(peers + len(report.peer_groups_by_peer), report.transport)) is not None:
                echo(warning)
            with clock.part("metrics"):
                metrics.record(report, eval_accuracy=None if evaluated is None else evaluated.accuracy, loop=lap,
                               alone_s=alone.seconds())
            g = loss_params(node.config.loss, step=node.trainer.policy_version).divergence_threshold
            for line in mutes.check(report.scores, rejections_by_peer(report.transport.rejections), time.time(), g):
                echo(line)
            done += 1
            with clock.part("checkpoint"):
                checkpointer.after_round()
        evaluation.run_if_due(node, metrics.log)  # the final weights, when due
    finally:
        try:
            checkpointer.stop()
        finally:
            try:
                metrics.close()
            finally:
                try:
                    helpers.close()  # a batch handed over before a stop still goes out
                finally:
                    node.transport.close()
