"""One node's round: generate and score its own groups, publish them, take its peers' through the intake,
and take one F-TIS step on its own groups plus a fair mix of its peers' (docs/node.md).

    report = node.run_round()      # one round; the run loop (join.py) passes its evaluation and helper threads

The node's own groups are made here, once, in both forms: the wire batch it publishes and the training groups
its step takes, with the rewards its task gave them. Peers' batches enter only through ``intake/``: collected
(in the default ``async`` mode whatever has arrived; in ``rounds`` mode after waiting for the peers' batches of
this round, up to a deadline: ``intake/rounds_barrier.py``), scored with this node's task, and mixed with the
own groups into the step's advantage groups (``intake/grouping.py``: vertical, or horizontal in rounds mode),
which also decides which prompts a round answers. The
model is trained in place, so the next round generates with the weights this round produced, and the
generator's policy version says so.
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ftis.node.config import NodeConfig
from ftis.node.generation import Generator
from ftis.node.generation.factory import stop_strings
from ftis.node.intake import Intake
from ftis.node.intake.peer_selection import DatedGroup
from ftis.node.models import Policy
from ftis.node.records.round_report import RoundReport
from ftis.node.records.utilisation import Stopwatch
from ftis.node.runner.helper_threads import HelperThreads
from ftis.node.runner.rng import RngState, node_rng
from ftis.node.swarm.transport import Transport
from ftis.node.tasks import Problem, Task
from ftis.node.tasks.prompts import policy_prompter
from ftis.node.tasks.steps import zero_false_steps
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.trainer import Trainer
from ftis.protocol import (
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
)


class RoundInterrupted(RuntimeError):
    """The node was stopped inside an optimizer step: its weights belong to no completed round."""


@dataclass(frozen=True)
class NodeState:
    """A node's state at the end of a completed round, besides the model's weights (``checkpoint_files.py``)."""

    round: int  # rounds completed: the number of the next round
    rng: RngState
    trainer: dict[str, object]  # Trainer.state_dict(): optimizer state and policy version


@dataclass(frozen=True)
class RoundStart:
    """The state a round starts from, that of the last completed round: what ``state_dict`` saves."""

    round: int
    steps_started: int
    rng: RngState


@dataclass(frozen=True)
class OwnBatch:
    """This node's batch of the round, its groups as the trainer takes them, and what making them took."""

    batch: RolloutBatch  # what it publishes
    groups: list[TrainingGroup]  # the same groups with this node's rewards, for its own step
    tokens: int
    seconds: float
    false_steps: int = 0  # right answers given no reward for a false equation on the way (``[task] check_steps``)

    @property
    def rewards(self) -> list[float]:
        return [float(reward) for group in self.groups for reward in group.rewards]


class Node:
    def __init__(self, config: NodeConfig, policy: Policy, task: Task, generator: Generator, transport: Transport):
        self.config, self.policy, self.task, self.generator, self.transport = (
            config, policy, task, generator, transport)
        self.trainer = Trainer(policy.model, policy.adapter, config.loss, config.trainer,
                               pad_id=policy.tokenizer.pad_token_id or 0)
        self.round = 0
        self._rng = node_rng(config.model.seed, transport.peer_id)
        embedding_rows = int(policy.model.get_input_embeddings().weight.shape[0])
        self._vocab_size = max(len(policy.tokenizer), embedding_rows)  # what this node's batches declare
        generation = config.generation
        self.sampling = SamplingSettings(generation.temperature, generation.top_p, generation.top_k,
                                         generation.max_new_tokens)
        # how this node renders a problem: template, begin-of-sequence token, solved examples (tasks/prompts.py)
        self.prompter = policy_prompter(policy, task, chat_template=config.model.chat_template, bos=config.model.bos,
                                        few_shot=config.task.few_shot)
        self.chat = self.prompter.chat
        self.stop = stop_strings(policy, generation)  # what ends a completion besides end-of-sequence tokens
        # the only way peers' batches enter a round: collected, scored, mixed with the own groups (intake/)
        self.intake = Intake(config, task, self.prompter, transport, self._rng, policy.fingerprint, embedding_rows)
        self.grouping = self.intake.grouping  # which prompts a round answers, under which group ids
        self._rounds_mode = config.loop.mode == "rounds"
        self._start = self._snapshot()

    def run_round(self, evaluate: Callable[[], object] | None = None,
                  helpers: HelperThreads | None = None) -> RoundReport:
        """One round. ``evaluate`` (the run loop's periodic evaluation) runs once this round's batch is
        published and before its step: the weights are still the ones the round generated with, and the
        peers have this node's batch without waiting for the evaluation (in rounds mode, they train meanwhile).
        ``helpers`` (the run loop's helper threads, ``helper_threads.py``): publishing and decoding peers'
        batches overlap generating and training, with the same results; the round waits for its publish after
        its step (raising its error), so the round's report counts it as before."""
        watch = Stopwatch()  # where the round's wall time goes (records/utilisation.py)
        with watch.part("collect"):  # a node joining a swarm that is ahead starts at the swarm's round
            self.round = self.intake.join_round(self.round)
        self._start = self._snapshot()  # the state of the last completed round, for state_dict
        own = self._generate(watch, helpers)
        with watch.part("publish"):
            self._publish(own.batch, helpers)
        if evaluate is not None:
            with watch.part("eval"):
                evaluate()
        with watch.part("collect"):
            collected = self.intake.collect(self.round)
        with watch.part("score_peers"):
            peers = self.intake.score(collected)
        with watch.part("select"):
            grouped = self.intake.groups(own.groups, peers)
        with watch.part("train"):
            step = self.trainer.step(grouped.merged.groups, own_peer_id=self.transport.peer_id)
        if helpers is not None:
            with watch.part("publish"):
                helpers.publisher.flush()
        with watch.part("generate"):  # the generator's own work: vLLM copies the new weights into its engine
            self.generator.sync_weights(self.trainer.policy_version)
        self.intake.judge(step, peers)
        report = RoundReport(
            round=self.round, own_reward=_mean(own.rewards), peer_reward=_mean(peers.rewards),
            own_groups=len(own.groups), peer_groups_received=len(peers.candidates),
            peer_groups_used=len(grouped.chosen), peer_groups_by_peer=_by_peer(grouped.chosen),
            unusable_groups=peers.unusable, unscored_groups=peers.unscored, own_false_steps=own.false_steps,
            peer_false_steps=peers.false_steps, generation_tokens=own.tokens,
            generation_seconds=own.seconds,
            waited_seconds=collected.waited_seconds, late_peers=collected.late_peers,
            merged_groups=grouped.merged.merged, merged_group_size=_mean(grouped.merged.sizes),
            mismatched_groups=grouped.merged.mismatched,
            generator=_generator_stats(self.generator), step=step, transport=self.transport.stats(),
            seconds=watch.seconds, scores=self.transport.scores(), peer_use=self.intake.note_use(peers.use))
        self.round += 1
        if self._rounds_mode:  # fall into step with peers that are ahead
            self.round = max(self.round, self.intake.swarm_round())
        return report

    def state_dict(self) -> NodeState:
        """The state as of the end of the last completed round (the weights are the policy's). Callable at
        any point, e.g. after Ctrl-C interrupted a round: the round's random draws are undone by taking the
        RNG states of its start. Raises ``RoundInterrupted`` if the round was stopped inside its optimizer
        step, where the weights are neither the last round's nor the next one's."""
        if self.round != self._start.round:  # a round completed since the snapshot: we are between rounds
            self._start = self._snapshot()
        if self.trainer.steps_started != self._start.steps_started:
            raise RoundInterrupted(f"round {self.round} was stopped inside its optimizer step")
        return NodeState(self._start.round, self._start.rng, self.trainer.state_dict())

    def load_state_dict(self, state: NodeState) -> None:
        """Continue from ``state``: its round, optimizer, policy version and RNG states. Load the weights into
        the policy first: the generator takes them here (``sync_weights``)."""
        self.trainer.load_state_dict(state.trainer)
        self.generator.sync_weights(self.trainer.policy_version)
        self.round = state.round
        state.rng.restore(self._rng)
        self._start = self._snapshot()

    def _snapshot(self) -> RoundStart:
        return RoundStart(self.round, self.trainer.steps_started, RngState.capture(self._rng))

    def _publish(self, batch: RolloutBatch, helpers: HelperThreads | None) -> None:
        if helpers is None:
            self.transport.publish(batch)
        else:
            helpers.publisher.submit(self.transport.publish, batch)

    def _problems(self) -> list[Problem]:
        return self.grouping.problems(self.round)

    def _generate(self, watch: Stopwatch, helpers: HelperThreads | None) -> OwnBatch:
        """The round's batch: its prompts answered by the generator, each completion scored by this node's task.
        Its groups go out as the wire batch and stay here as training groups, with the rewards computed here."""
        started = time.perf_counter()
        problems = self._problems()
        tokenizer = self.policy.tokenizer
        prompts = [self.prompter.ids(p) for p in problems]
        seed = int(self._rng.integers(2**31))
        if helpers is not None:  # peers' batches so far, decoded while the generator runs
            self.intake.take_early(helpers.decode_ahead)
        with watch.part("generate"):
            completions = self.generator.generate(prompts, self.config.generation.group_size, self.sampling, seed=seed)
        self.intake.texts_ready()  # the tokenizer is free again from here
        groups, training, false_steps = [], [], 0
        for k, (problem, prompt, generated) in enumerate(zip(problems, prompts, completions, strict=True)):
            texts = tokenizer.batch_decode([c.token_ids.tolist() for c in generated], skip_special_tokens=True)
            with watch.part("score_own"):
                rewards = np.array([self.task.reward(text, problem.answer) for text in texts], dtype=np.float64)
                if self.config.task.check_steps:
                    false_steps += zero_false_steps(texts, rewards)
            sent = texts if self.config.swarm.send_texts else [None] * len(texts)
            group = Group(
                group_id=self.grouping.group_id(self.transport.peer_id, self.round, k),
                task=TaskRef(problem.dataset, problem.split, problem.index, problem.answer),
                prompt_ids=prompt,
                completions=tuple(c.to_completion(reward, text)
                                  for c, reward, text in zip(generated, rewards.tolist(), sent, strict=True)),
            )
            groups.append(group)
            training.append(TrainingGroup(group.group_id, self.transport.peer_id, group.prompt_ids, group.columns,
                                          rewards, off_policy=self.config.loss.filter_local,
                                          temperature=self.sampling.temperature, task=group.task))
        batch = RolloutBatch(
            run_id=self.config.swarm.run_id,
            peer_id=self.transport.peer_id,
            round=self.round,
            created_at=time.time(),
            policy=PolicyInfo(self.policy.name, self.policy.revision or "", self.policy.adapter,
                              self.trainer.policy_version),
            tokenizer=TokenizerInfo(self.policy.fingerprint, self._vocab_size),
            sampling=self.sampling,
            groups=tuple(groups),
        )
        tokens = sum(c.num_tokens for generated in completions for c in generated)
        seconds = time.perf_counter() - started
        watch.seconds["build"] = seconds - watch.seconds["generate"] - watch.seconds.get("score_own", 0.0)
        return OwnBatch(batch, training, tokens, seconds, false_steps)


def _mean(values: list[float] | list[int]) -> float:
    return float(np.mean(values)) if values else float("nan")


def _by_peer(chosen: list[DatedGroup]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for dated in chosen:
        counts[dated.group.peer_id] = counts.get(dated.group.peer_id, 0) + 1
    return counts


def _generator_stats(generator: object) -> dict[str, object]:
    """A backend's counters, for backends that keep some (vLLM: weight syncs, stale generations)."""
    stats = getattr(generator, "stats", None)
    return asdict(stats()) if callable(stats) else {}
