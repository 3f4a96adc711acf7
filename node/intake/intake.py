"""``Intake``: where peers' batches enter a node's round, and leave it as the groups its step trains on.

    intake.take_early(decode_ahead)        # with helper threads: before generating, decode what has arrived
    intake.texts_ready()                   # ...and wait for it once the generator is done (one tokenizer user)
    collected = intake.collect(round_)     # the peers' batches for this step (rounds mode: waits for them)
    peers = intake.score(collected)        # admitted, then scored with this node's task: usable groups, dated
    grouped = intake.groups(own, peers)    # the fair mix, merged with the own groups (grouping.py)
    intake.judge(step, peers)              # what the step found of each peer, charged to its score

Every batch passes the door first (``admission.py``): its groups cut to those within this node's bounds and
the step's budget, before any work per token (decoding ahead included); a batch holding a completion longer than
this node samples is charged once (``TOO_LONG``). Each batch is then scored with this node's task
(``scoring.score_batch``), within the step's time for it (``mix.max_scoring_s``): a group in this node's tokens
keeps its ids and log-probs, one of another tokenizer is rebuilt from its texts (``text_groups.py``); a peer whose
prompts are not their problems' is charged once a batch, and so is one with a group whose scoring raised
(``SCORING_FAILED``: nothing a peer sends ends a round). The usable groups are dated for the mix by when their batch
was made, as this node ranks it (``_freshness``).
"""

import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from ftis.node.config import NodeConfig
from ftis.node.intake.admission import Admission, AdmissionLimits, StepBudget
from ftis.node.intake.grouping import GROUPINGS, Grouped
from ftis.node.intake.peer_selection import DatedGroup
from ftis.node.intake.rounds_barrier import RoundsBarrier
from ftis.node.intake.scoring import Texts, batch_key, score_batch
from ftis.node.intake.text_groups import Retokenizer
from ftis.node.swarm.exchange.inbox import MAX_PEERS_TRACKED
from ftis.node.swarm.exchange.reasons import NONFINITE, PROMPT_MISMATCH, SCORING_FAILED, TOO_LONG
from ftis.node.swarm.transport import ReceivedBatch, Transport
from ftis.node.tasks import Task
from ftis.node.tasks.prompts import Prompter
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.step_figures import StepFigures

# Decodes received batches' completions with a tokenizer, ids checked below a vocabulary size, on another thread
# (the run loop's ``HelperThreads.decode_ahead``).
DecodeAhead = Callable[[list[ReceivedBatch], object, int], "Future[Texts]"]


@dataclass(frozen=True)
class PeerGroups:
    """The peers' batches a round scored: their usable groups, dated for the mix, and what scoring found."""

    candidates: list[DatedGroup]
    rewards: list[float]
    unusable: int
    batches_by_peer: dict[str, int]  # the peers' batches this step draws on (for their scores)
    use: dict[str, str]  # how each peer's groups of this round are trained: "token", "sequence" or "none"
    unscored: int = 0  # groups not scored: past the step's budget (admission.py) or its time for scoring
    false_steps: int = 0  # right answers given no reward for a false equation on the way (tasks/steps.py)


@dataclass(frozen=True)
class Collected:
    """The peers' batches a round's step draws on, and what waiting for them took."""

    received: list[ReceivedBatch]
    waited_seconds: float = 0.0  # rounds mode: the wait for this round's batches
    late_peers: int = 0  # ...and the live peers still missing at its deadline


class Intake:
    def __init__(self, config: NodeConfig, task: Task, prompter: Prompter, transport: Transport,
                 rng: np.random.Generator, fingerprint: str, embedding_rows: int):
        """``rng``: the node's, from which vertical grouping draws the round's prompts; ``fingerprint``: this
        node's tokenizer's (``prompter.tokenizer``); ``embedding_rows``: its model's, a peer's id at or above
        which has no embedding here."""
        self.config, self.task, self.transport, self.prompter = config, task, transport, prompter
        tokenizer = prompter.tokenizer
        self._tokenizer, self._fingerprint, self._embedding_rows = tokenizer, fingerprint, embedding_rows
        self.grouping = GROUPINGS[config.loop.grouping](config, task, rng)  # the round's prompts, the step's groups
        generation = config.generation
        # peers with another tokenizer: their texts in this node's tokens (None: their batches are unusable)
        self._retokenizer = (Retokenizer.for_node(tokenizer, prompter.chat, generation.max_new_tokens, prompter,
                                                  generation.stop)
                             if config.swarm.other_tokenizers == "sequence" else None)
        self._rounds_mode = config.loop.mode == "rounds"
        self._barrier = RoundsBarrier(config, transport, fingerprint)
        self._peer_use: OrderedDict[str, str] = OrderedDict()  # the newest MAX_PEERS_TRACKED peers' last use
        self._early: list[ReceivedBatch] = []  # taken before generating, trained on first
        self._admission = Admission(AdmissionLimits.of(config), fingerprint)
        self._budget: StepBudget | None = None  # the step's, from its first batch admitted to its scoring
        self._admitted: set[int] = set()  # the batches (``id``) admitted early this step
        self._unscored = 0  # ...and the groups its budget left out so far
        self._decoding: Future[Texts] | None = None
        self._texts: Texts = {}

    def take_early(self, decode_ahead: DecodeAhead) -> None:
        """Take the peers' batches that have arrived, and decode those in this node's tokens with
        ``decode_ahead`` while the generator runs (the round's step trains on them first)."""
        self._early = self._admit(self.transport.receive())
        own_ids = [item for item in self._early if item.batch.tokenizer.fingerprint == self._fingerprint]
        self._decoding = decode_ahead(own_ids, self._tokenizer, self._embedding_rows) if own_ids else None

    def texts_ready(self) -> None:
        """Wait for the decoding ``take_early`` started: the tokenizer is free again from here."""
        self._texts = self._decoding.result() if self._decoding is not None else {}
        self._decoding = None

    def collect(self, round_: int) -> "Collected":
        """The peers' batches for this round's step (those taken early first). Async mode takes what has arrived
        and never waits; rounds mode waits for this round's batches (later rounds' stay in the transport's inbox,
        charged, until this node reaches them: ``rounds_barrier.py``)."""
        if self._rounds_mode:
            self._barrier.enter(round_)
        received, self._early = [*self._early, *self.transport.receive()], []
        if not self._rounds_mode:
            return Collected(received)
        waited = self._barrier.wait(received, round_)
        return Collected(waited.received, waited.seconds, waited.late_peers)

    def score(self, collected: "Collected") -> PeerGroups:
        """Each collected batch scored with this node's task: its usable groups, dated for the mix."""
        config = self.config
        texts, self._texts = self._texts, {}
        early = set(self._admitted)  # admitted by take_early; the rest pass the door now
        fresh = self._admit([item for item in collected.received if id(item) not in early])
        received = iter(fresh)
        admitted = [item if id(item) in early else next(received) for item in collected.received]
        unscored, self._unscored, self._budget, self._admitted = self._unscored, 0, None, set()  # the step's door shuts
        deadline = time.monotonic() + config.mix.max_scoring_s
        candidates: list[DatedGroup] = []
        rewards: list[float] = []
        unusable = false_steps = 0
        batches_by_peer: dict[str, int] = {}
        use: dict[str, str] = {}
        for item in admitted:
            scored = score_batch(item.batch, self.task, self._tokenizer,
                                 trust_peer_answers=config.task.trust_peer_answers, off_policy=True,
                                 vocab_size=self._embedding_rows, texts=texts.get(batch_key(item)),
                                 split=config.task.split, fingerprint=self._fingerprint,
                                 retokenizer=self._retokenizer, prompter=self.prompter,
                                 per_sequence=config.loss.same_tokenizer_weights == "sequence", deadline=deadline,
                                 max_row_tokens=config.trainer.max_tokens_per_microbatch,
                                 check_steps=config.task.check_steps)
            unscored += scored.unscored
            false_steps += scored.false_steps
            if scored.false_steps:  # what its right answers teach: evidence against it, as the filter's verdict is
                self.transport.report_filtered(item.peer_id, 1, scored.right, scored.false_steps)
            if scored.failed:
                self.transport.report_fault(item.peer_id, SCORING_FAILED)
            if scored.too_long:
                self.transport.report_fault(item.peer_id, TOO_LONG)
            if scored.groups:
                use[item.peer_id] = "sequence" if scored.per_sequence else "token"
            else:
                use.setdefault(item.peer_id, "none")
            if scored.mismatched:
                self.transport.report_fault(item.peer_id, PROMPT_MISMATCH)
            candidates += [DatedGroup(group, _freshness(item, config.swarm.max_age_s)) for group in scored.groups]
            batches_by_peer[item.peer_id] = batches_by_peer.get(item.peer_id, 0) + 1
            rewards += scored.rewards
            unusable += scored.unusable
        return PeerGroups(candidates, rewards, unusable, batches_by_peer, use, unscored, false_steps)

    def _admit(self, received: list[ReceivedBatch]) -> list[ReceivedBatch]:
        """``received`` through the door (``admission.py``), charged to this step's budget; a batch holding a
        completion too long for this node charges its peer."""
        if self._budget is None:
            self._budget = self._admission.budget()
        admitted = self._admission.admit(received, self._budget)
        for peer in admitted.too_long:
            self.transport.report_fault(peer, TOO_LONG)
        self._unscored += admitted.unscored
        self._admitted.update(id(item) for item in admitted.received)
        return admitted.received

    def groups(self, own: list[TrainingGroup], peers: PeerGroups) -> Grouped:
        """The step's groups: ``own`` first, then the peers' groups the mix chooses (``grouping.py``)."""
        return self.grouping.groups(own, peers.candidates)

    def judge(self, step: StepFigures, peers: PeerGroups) -> None:
        """Evidence for the peers' scores from the step: a refused step charges the peers whose groups alone
        were not finite; the filter's verdict on each peer's completions is reported (not this node's own)."""
        for peer in step.nonfinite_peers:
            if peer in peers.batches_by_peer:
                self.transport.report_fault(peer, NONFINITE)
        for peer, counts in step.filtered_by_peer.items():
            if peer in peers.batches_by_peer:
                batches = peers.batches_by_peer[peer]
                self.transport.report_filtered(peer, batches, counts.completions, counts.divergence_filtered)
                if counts.implausible:  # what its right answers teach, judged as a false step on the way is
                    self.transport.report_filtered(peer, batches, counts.taught, counts.implausible)

    def note_use(self, use: dict[str, str]) -> dict[str, str]:
        """How this node last trained on each peer's groups, the newest MAX_PEERS_TRACKED peers (``status``)."""
        for peer, form in use.items():
            self._peer_use.pop(peer, None)
            self._peer_use[peer] = form
        while len(self._peer_use) > MAX_PEERS_TRACKED:
            self._peer_use.popitem(last=False)
        return dict(self._peer_use)

    def join_round(self, round_: int) -> int:
        """Rounds mode, before a round: ``round_``, or, for a node that has not yet trained beside a live peer, the
        swarm's round (``rounds_barrier.py``)."""
        return self._barrier.join(round_) if self._rounds_mode else round_

    def swarm_round(self) -> int:
        """Rounds mode, once a round is done: the round to jump to, where enough live peers are ahead (-1: none); the
        transport moves on to the next round (``rounds_barrier.py``)."""
        return self._barrier.swarm_round()


def _freshness(item: ReceivedBatch, max_age_s: float) -> float:
    """When the batch was made, as the mix ranks it: its creation time, unless that is after it arrived (a clock
    far ahead, or a peer dating its batches ahead to be chosen first): then as stale as a batch can be."""
    created = item.batch.created_at
    return created if created <= item.received_at else item.received_at - max_age_s
