"""Per-peer scores from what this node sees of each peer, and muting the peers that score too low.

A public swarm has peers that forge, flood, stall or send garbage. Each node keeps, per peer, two
exponentially decayed counts (half-life ``half_life_s``) of evidence, in units of one batch:

- good: a batch delivered: fetched, its size and hash as announced, strictly decoded, the batch that
  was announced (``DELIVERED_WEIGHT``);
- bad: a batch refused for what the peer sent (undecodable, another hash, other than announced, too
  large) or an invalid announcement record (``REFUSED_WEIGHT``);
- bad: a fetch that still failed after its retries (``FAILED_WEIGHT``, lower: the network may be at
  fault, not the peer); a delivery in the second half of its fetch deadline counts partly as one;
- bad: rounds mode, a round the peer was waited for and missed (``MISSED_WEIGHT``, higher: it held the node's
  round up to its deadline); one missed after several rounds on time in a row counts as a failed fetch instead
  (``intake/rounds_barrier.py``: a slow link, once, may be to blame);
- bad: the divergence filter's verdict. When a step trains on a peer's completions, the share ``f``
  of them dropped because their divergence exceeded g counts ``FILTERED_WEIGHT × f`` for each of the
  peer's batches the step drew them from (so sending more batches does not dilute it). Completions
  dropped for a non-positive advantage are normal and count nothing. A peer that makes up its
  log-probs (claims log-prob 0 on every token, say) is filtered almost entirely, and muting it costs
  training nothing: the filter would have dropped its completions anyway;
- bad: what its right answers teach. Of the peer's completions a step would have trained up (a positive
  advantage), the share dropped as too surprising to this node's own model (``[loss] max_surprise``), and of its
  right answers the share reached through a false equation (``[task] check_steps``), each count
  ``FILTERED_WEIGHT ×`` that share a batch, as the divergence's share does. Judged on its right answers, not on all
  its completions, a poisoner cannot dilute the verdict with ordinary wrong answers.

Refusals that say nothing about the peer (stale, another run or tokenizer, quota, full buffer, muted)
are not evidence. The score is ``(good + PRIOR) / (good + bad + PRIOR)``, in (0, 1]: 1 for a peer with
no bad evidence, whatever its amount of good. Once a peer's (decayed) evidence ``good + bad`` reaches
``min_evidence``, a score below ``mute_below`` mutes it: its batches are refused before any byte is
fetched, for ``mute_s`` at its first mute, twice as long at each next one, at most ``mute_max_s``.
After a mute the peer starts again from its record as decay left it, and is judged again only once
``min_evidence`` of new evidence has come in, so the record of before the mute alone never mutes it
twice.

What the default weights and threshold (0.3) mean, per batch: a peer is muted when more than ~58% of its completions
are divergence-filtered (honest heterogeneous peers measured a few percent in the demo) or of its right answers
carry a payload (one whose every right answer does is muted after its second batch; an honest tiny peer of another
model had 0.8–4.5% of its completions too surprising), when more than ~82% of its fetches fail after retries (a
flaky link that loses half of all attempts loses ~12% of batches with two retries), when more than 70% of its
batches are refused, or, in rounds mode, when it misses more than ~48% of the rounds it is waited for (then it is no
longer waited for): one that delivers one round in three is muted at its second miss, one in two within ~30 rounds,
one that misses one in five never.

Pure: every call takes the time ``now`` (unix seconds) from its caller; not thread-safe (the
``Inbox`` calls it under its lock).
"""

import math
from dataclasses import dataclass

from ftis.node.config import SwarmConfig

DELIVERED_WEIGHT = 1.0
REFUSED_WEIGHT = 1.0
FAILED_WEIGHT = 0.5
MISSED_WEIGHT = 2.5
FILTERED_WEIGHT = 4.0
PRIOR = 1.0  # good evidence every peer starts with: the score of a newcomer is 1
_FADED = 1e-3  # evidence below this, with no mute behind it, is forgotten (``forget_faded``)
# Records kept at most (``forget_faded``): past this, those with the oldest evidence go, muted or not, so that
# identities made by the thousand cost a node bounded memory (one forgotten while muted is judged afresh).
MAX_RECORDS = 8192


@dataclass(frozen=True)
class ReputationSettings:
    half_life_s: float  # evidence loses half its weight in this time
    min_evidence: float  # a peer is judged only with at least this much (decayed) evidence
    mute_below: float  # a judged peer whose score is below this is muted; 0: nobody is ever muted
    mute_s: float  # the first mute's length; each next one is twice the previous
    mute_max_s: float  # the longest mute


def reputation_settings(swarm: SwarmConfig) -> ReputationSettings:
    """The peer-score settings of ``[swarm]``."""
    return ReputationSettings(half_life_s=swarm.score_half_life_s, min_evidence=swarm.score_min_evidence,
                              mute_below=swarm.mute_below, mute_s=swarm.mute_s, mute_max_s=swarm.mute_max_s)


@dataclass(frozen=True)
class PeerScore:
    """One peer as this node judges it, at the time of the snapshot."""

    score: float  # (good + PRIOR) / (good + bad + PRIOR)
    good: float  # decayed evidence, in batches
    bad: float
    muted_until: float | None  # unix seconds; None when not muted now
    mutes: int  # times it was muted so far

    @property
    def evidence(self) -> float:
        return self.good + self.bad


@dataclass
class _Record:
    at: float  # the time ``good`` and ``bad`` were decayed to
    good: float = 0.0
    bad: float = 0.0
    new: float = 0.0  # evidence (not decayed) since the last mute began, counted outside mutes
    mutes: int = 0
    muted_until: float = -math.inf


class Reputation:
    def __init__(self, settings: ReputationSettings):
        self._settings = settings
        self._records: dict[str, _Record] = {}

    def delivered(self, peer_id: str, now: float, share: float = 1.0) -> None:
        """A batch of the peer arrived intact and as announced (``share`` of a delivery: a late one counts
        for less, its rest as a failure)."""
        self._add(peer_id, now, good=DELIVERED_WEIGHT * share)

    def refused(self, peer_id: str, now: float) -> None:
        """A batch or an announcement of the peer was refused for its contents."""
        self._add(peer_id, now, bad=REFUSED_WEIGHT)

    def failed(self, peer_id: str, now: float, share: float = 1.0) -> None:
        """A batch of the peer could not be fetched, retries included (``share``: that part of a late delivery)."""
        self._add(peer_id, now, bad=FAILED_WEIGHT * share)

    def missed(self, peer_id: str, now: float) -> None:
        """Rounds mode: the peer missed a round the node waited for."""
        self._add(peer_id, now, bad=MISSED_WEIGHT)

    def filtered(self, peer_id: str, batches: int, completions: int, filtered: int, now: float) -> None:
        """A step trained on ``completions`` of the peer's completions, drawn from ``batches`` of its batches,
        and the divergence filter dropped ``filtered`` of them: the verdict on those batches."""
        if completions <= 0:
            return
        if not 0 <= filtered <= completions or batches < 1:
            raise ValueError(f"need batches ≥ 1 and 0 ≤ filtered ≤ completions, got {batches}, {filtered}, "
                             f"{completions}")
        self._add(peer_id, now, bad=FILTERED_WEIGHT * batches * filtered / completions)

    def muted(self, peer_id: str, now: float) -> bool:
        record = self._records.get(peer_id)
        return record is not None and now < record.muted_until

    def snapshot(self, now: float) -> dict[str, PeerScore]:
        """Every peer with a record, its counts decayed to ``now``."""
        scores = {}
        for peer_id, record in self._records.items():
            factor = self._decay(record, now)
            good, bad = record.good * factor, record.bad * factor
            scores[peer_id] = PeerScore(
                score=score(good, bad), good=good, bad=bad,
                muted_until=record.muted_until if now < record.muted_until else None, mutes=record.mutes)
        return dict(sorted(scores.items()))

    def forget_faded(self, now: float) -> None:
        """Drop the records whose evidence has decayed to nothing and that were never muted: bounded memory
        under peers that come and go (a muted peer is remembered, so its next mute is longer); then, past
        ``MAX_RECORDS``, those whose latest evidence is oldest."""
        for peer_id in [p for p, r in self._records.items()
                        if r.mutes == 0 and (r.good + r.bad) * self._decay(r, now) < _FADED]:
            del self._records[peer_id]
        if len(self._records) > MAX_RECORDS:
            oldest = sorted(self._records, key=lambda peer_id: self._records[peer_id].at)
            for peer_id in oldest[: len(self._records) - MAX_RECORDS]:
                del self._records[peer_id]

    def _add(self, peer_id: str, now: float, good: float = 0.0, bad: float = 0.0) -> None:
        record = self._records.setdefault(peer_id, _Record(at=now))
        factor = self._decay(record, now)
        record.good, record.bad, record.at = record.good * factor + good, record.bad * factor + bad, max(now, record.at)
        if now >= record.muted_until:
            record.new += good + bad
            self._judge(record, now)

    def _judge(self, record: _Record, now: float) -> None:
        s = self._settings
        judged = record.good + record.bad >= s.min_evidence and record.new >= s.min_evidence
        if judged and score(record.good, record.bad) < s.mute_below:
            record.mutes += 1
            record.muted_until = now + mute_length(s, record.mutes)
            record.new = 0.0

    def _decay(self, record: _Record, now: float) -> float:
        """The factor that takes counts from ``record.at`` to ``now`` (1 if the clock went back)."""
        return 0.5 ** (max(0.0, now - record.at) / self._settings.half_life_s)


def score(good: float, bad: float) -> float:
    return (good + PRIOR) / (good + bad + PRIOR)


def mute_length(settings: ReputationSettings, mutes: int) -> float:
    """Seconds of a peer's ``mutes``-th mute (1 for the first): doubling, capped."""
    return min(settings.mute_s * 2.0 ** min(mutes - 1, 64), settings.mute_max_s)
