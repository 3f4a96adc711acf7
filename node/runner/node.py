"""One node's round: generate its groups, publish them, collect its peers', score everything with its
own task, and take one F-TIS step on its own groups plus a fair mix of its peers' (docs/node.md).

    report = node.run_round()      # one round; the run loop (join.py) passes its evaluation and helper threads

In the default ``async`` mode a round never waits for peers: it trains on whatever has arrived. In
``rounds`` mode it waits for its peers' batches of the same round, up to a deadline, and trains on the
batches of this round and earlier ones (``rounds_barrier.py``). Which prompts a node answers and how groups
become advantage groups is the grouping's (``grouping.py``: vertical, or horizontal in rounds mode). The
model is trained in place, so the next round generates with the weights this round produced, and the
generator's policy version says so.
"""

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ftis.node.config import NodeConfig
from ftis.node.generation import Generator
from ftis.node.generation.factory import stop_strings
from ftis.node.models import Policy
from ftis.node.records.round_report import RoundReport
from ftis.node.records.utilisation import Stopwatch
from ftis.node.runner.grouping import GROUPINGS
from ftis.node.runner.helper_threads import HelperThreads, Texts, batch_key
from ftis.node.runner.rng import RngState
from ftis.node.runner.rounds_barrier import RoundsBarrier
from ftis.node.swarm.inbox import MAX_PEERS_TRACKED, NONFINITE, PROMPT_MISMATCH
from ftis.node.swarm.transport import ReceivedBatch, Transport
from ftis.node.tasks import Problem, Task
from ftis.node.tasks.prompts import policy_prompter
from ftis.node.trainer.peer_selection import DatedGroup
from ftis.node.trainer.step_metrics import StepMetrics
from ftis.node.trainer.text_groups import Retokenizer
from ftis.node.trainer.trainer import Trainer
from ftis.node.trainer.wire_groups import score_batch, score_own_batch
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
    """A node's state at the end of a completed round, besides the model's weights (``checkpoint.py``)."""

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
    """This node's batch of the round, and what making it took."""

    batch: RolloutBatch
    rewards: list[list[float]]  # this node's rewards of each group's completions (score_own_batch)
    tokens: int
    seconds: float
    arrived: list[ReceivedBatch]  # peers' batches taken before generating (with helpers), for this round's step
    peer_texts: Texts  # ...their completions' texts (decode_groups)


@dataclass(frozen=True)
class PeerGroups:
    """The peers' batches a round scored: their usable groups, dated for the mix, and what scoring found."""

    candidates: list[DatedGroup]
    rewards: list[float]
    unusable: int
    batches_by_peer: dict[str, int]  # the peers' batches this step draws on (for their scores)
    use: dict[str, str]  # how each peer's groups of this round are trained: "token", "sequence" or "none"


class Node:
    def __init__(self, config: NodeConfig, policy: Policy, task: Task, generator: Generator, transport: Transport):
        self.config, self.policy, self.task, self.generator, self.transport = (
            config, policy, task, generator, transport)
        self.trainer = Trainer(policy.model, policy.adapter, config.loss, config.trainer,
                               pad_id=policy.tokenizer.pad_token_id or 0)
        self.round = 0
        self._rng = np.random.default_rng([config.model.seed, 1])
        embedding_rows = int(policy.model.get_input_embeddings().weight.shape[0])
        self._vocab_size = max(len(policy.tokenizer), embedding_rows)  # what this node's batches declare
        self._embedding_rows = embedding_rows  # a peer's id at or above it has no embedding here
        generation = config.generation
        self.sampling = SamplingSettings(generation.temperature, generation.top_p, generation.top_k,
                                         generation.max_new_tokens)
        # how this node renders a problem: template, begin-of-sequence token, solved examples (tasks/prompts.py)
        self.prompter = policy_prompter(policy, task, chat_template=config.model.chat_template, bos=config.model.bos,
                                        few_shot=config.task.few_shot)
        self.chat = self.prompter.chat
        self.stop = stop_strings(policy, generation)  # what ends a completion besides end-of-sequence tokens
        # peers with another tokenizer: their texts in this node's tokens (None: their batches are unusable)
        self._retokenizer = (Retokenizer.for_node(policy.tokenizer, self.chat, generation.max_new_tokens,
                                                  self.prompter, generation.stop)
                             if config.swarm.other_tokenizers == "sequence" else None)
        self._peer_use: OrderedDict[str, str] = OrderedDict()  # the newest MAX_PEERS_TRACKED peers' last use
        self.grouping = GROUPINGS[config.loop.grouping](config, task, self._rng)
        self._rounds_mode = config.loop.mode == "rounds"
        self._barrier = RoundsBarrier(config, transport, policy.fingerprint)
        self._start = self._snapshot()

    def run_round(self, evaluate: Callable[[], object] | None = None,
                  helpers: HelperThreads | None = None) -> RoundReport:
        """One round. ``evaluate`` (the run loop's periodic evaluation) runs once this round's batch is
        published and before its step: the weights are still the ones the round generated with, and the
        peers have this node's batch without waiting for the evaluation (in rounds mode, they train meanwhile).
        ``helpers`` (the run loop's helper threads, ``helper_threads.py``): publishing and decoding peers'
        batches overlap generating and training, with the same results; the round waits for its publish after
        its step (raising its error), so the round's report counts it as before."""
        self._start = self._snapshot()  # the state of the last completed round, for state_dict
        watch = Stopwatch()  # where the round's wall time goes (records/utilisation.py)
        own = self._generate(watch, helpers)
        with watch.part("publish"):
            self._publish(own.batch, helpers)
        if evaluate is not None:
            with watch.part("eval"):
                evaluate()
        with watch.part("score_own"):  # the rewards computed while building the batch: decoded and scored once
            scored_own = score_own_batch(own.batch, own.rewards, off_policy=self.config.loss.filter_local)
        with watch.part("collect"):
            received, waited, late = self._collect(own.arrived)
        with watch.part("score_peers"):
            peers = self._score_peers(received, own.peer_texts)
        with watch.part("select"):
            grouped = self.grouping.groups(scored_own.groups, peers.candidates)
        with watch.part("train"):
            step = self.trainer.step(grouped.merged.groups)
        if helpers is not None:
            with watch.part("publish"):
                helpers.publisher.flush()
        with watch.part("generate"):  # the generator's own work: vLLM copies the new weights into its engine
            self.generator.sync_weights(self.trainer.policy_version)
        self._judge_peers(step, peers.batches_by_peer)
        report = RoundReport(
            round=self.round, own_reward=_mean(scored_own.rewards), peer_reward=_mean(peers.rewards),
            own_groups=len(scored_own.groups), peer_groups_received=len(peers.candidates),
            peer_groups_used=len(grouped.chosen), peer_groups_by_peer=_by_peer(grouped.chosen),
            unusable_groups=peers.unusable, generation_tokens=own.tokens, generation_seconds=own.seconds,
            waited_seconds=waited, late_peers=late, merged_groups=grouped.merged.merged,
            merged_group_size=_mean(grouped.merged.sizes), mismatched_groups=grouped.merged.mismatched,
            generator=_generator_stats(self.generator), step=step, transport=self.transport.stats(),
            seconds=watch.seconds, scores=self.transport.scores(), peer_use=self._note_use(peers.use))
        self.round += 1
        if self._rounds_mode:  # fall into step with peers that are ahead
            self.round = max(self.round, self._barrier.swarm_round())
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

    def _collect(self, arrived: list[ReceivedBatch]) -> tuple[list[ReceivedBatch], float, int]:
        """Peers' batches for this round's step (``arrived``: those taken earlier in the round, first), the
        seconds spent waiting, and the live peers still missing at the deadline. Async mode takes what has
        arrived and never waits; rounds mode waits for this round's batches, and holds later rounds' back."""
        received = [*arrived, *self.transport.receive()]
        if not self._rounds_mode:
            return received, 0.0, 0
        waited = self._barrier.wait(received, self.round)
        return self._barrier.later.take(waited.received, self.round), waited.seconds, waited.late_peers

    def _score_peers(self, received: list[ReceivedBatch], texts: Texts) -> PeerGroups:
        """Each batch scored with this node's task (``wire_groups.score_batch``); a peer whose prompts are
        not their problems' is charged, once a batch."""
        candidates, rewards, unusable, batches_by_peer, use = [], [], 0, {}, {}
        for item in received:
            scored = score_batch(item.batch, self.task, self.policy.tokenizer,
                                 trust_peer_answers=self.config.task.trust_peer_answers, off_policy=True,
                                 vocab_size=self._embedding_rows, texts=texts.get(batch_key(item)),
                                 split=self.config.task.split, fingerprint=self.policy.fingerprint,
                                 retokenizer=self._retokenizer, prompter=self.prompter,
                                 per_sequence=self.config.loss.same_tokenizer_weights == "sequence")
            if scored.groups:
                use[item.peer_id] = "sequence" if scored.per_sequence else "token"
            else:
                use.setdefault(item.peer_id, "none")
            if scored.mismatched:
                self.transport.report_fault(item.peer_id, PROMPT_MISMATCH)
            candidates += [DatedGroup(group, _freshness(item, self.config.swarm.max_age_s)) for group in scored.groups]
            batches_by_peer[item.peer_id] = batches_by_peer.get(item.peer_id, 0) + 1
            rewards += scored.rewards
            unusable += scored.unusable
        return PeerGroups(candidates, rewards, unusable, batches_by_peer, use)

    def _note_use(self, use: dict[str, str]) -> dict[str, str]:
        """How this node last trained on each peer's groups, the newest MAX_PEERS_TRACKED peers (``status``)."""
        for peer, form in use.items():
            self._peer_use.pop(peer, None)
            self._peer_use[peer] = form
        while len(self._peer_use) > MAX_PEERS_TRACKED:
            self._peer_use.popitem(last=False)
        return dict(self._peer_use)

    def _judge_peers(self, step: StepMetrics, batches_by_peer: dict[str, int]) -> None:
        """Evidence for the peers' scores from the step: a refused step charges the peers whose groups alone
        were not finite; the filter's verdict on each peer's completions is reported (not this node's own)."""
        for peer in step.nonfinite_peers:
            if peer in batches_by_peer:
                self.transport.report_fault(peer, NONFINITE)
        for peer, counts in step.filtered_by_peer.items():
            if peer in batches_by_peer:
                self.transport.report_filtered(peer, batches_by_peer[peer], counts.completions,
                                               counts.divergence_filtered)

    def _problems(self) -> list[Problem]:
        return self.grouping.problems(self.round)

    def _generate(self, watch: Stopwatch, helpers: HelperThreads | None) -> OwnBatch:
        started = time.perf_counter()
        problems = self._problems()
        tokenizer = self.policy.tokenizer
        prompts = [self.prompter.ids(p) for p in problems]
        seed = int(self._rng.integers(2**31))
        arrived, peer_texts = [], None  # with helpers: peers' batches so far, decoded while the generator runs
        if helpers is not None:
            arrived = self.transport.receive()
            own_ids = [item for item in arrived if item.batch.tokenizer.fingerprint == self.policy.fingerprint]
            peer_texts = helpers.decode_ahead(own_ids, tokenizer, self._embedding_rows) if own_ids else None
        with watch.part("generate"):
            completions = self.generator.generate(prompts, self.config.generation.group_size, self.sampling, seed=seed)
        decoded = peer_texts.result() if peer_texts is not None else {}  # the tokenizer is free again from here
        groups, rewards_by_group = [], []
        for k, (problem, prompt, generated) in enumerate(zip(problems, prompts, completions, strict=True)):
            texts = tokenizer.batch_decode([c.token_ids.tolist() for c in generated], skip_special_tokens=True)
            rewards = [self.task.reward(text, problem.answer) for text in texts]
            rewards_by_group.append(rewards)
            sent = texts if self.config.swarm.send_texts else [None] * len(texts)
            groups.append(Group(
                group_id=self.grouping.group_id(self.transport.peer_id, self.round, k),
                task=TaskRef(problem.dataset, problem.split, problem.index, problem.answer),
                prompt_ids=prompt,
                completions=tuple(c.to_completion(reward, text)
                                  for c, reward, text in zip(generated, rewards, sent, strict=True)),
            ))
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
        watch.seconds["build"] = seconds - watch.seconds["generate"]
        return OwnBatch(batch, rewards_by_group, tokens, seconds, arrived, decoded)


def _freshness(item: ReceivedBatch, max_age_s: float) -> float:
    """When the batch was made, as the mix ranks it: its creation time, unless that is after it arrived (a clock
    far ahead, or a peer dating its batches ahead to be chosen first): then as stale as a batch can be."""
    created = item.batch.created_at
    return created if created <= item.received_at else item.received_at - max_age_s


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
