"""Per-peer scores and mutes (``reputation.py``) alone, then as the ``Inbox`` feeds and applies them.

Run: python -m pytest tests/test_reputation.py -q

Time is passed in explicitly (the reputation) or comes from a fake clock (the inbox): nothing sleeps.
"""

import math

import pytest
from helpers.swarm import RUN_ID, T0, TOKENIZER, FakeClock, make_batch, publish

from ftis.node.config import SwarmConfig
from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.exchange.reasons import (
    BAD_ANNOUNCEMENT,
    BUFFER_FULL,
    DECODE_ERROR,
    FETCH_FAILED,
    HASH_MISMATCH,
    MUTED,
    OTHER_RUN,
    PEER_QUOTA,
    STALE,
    TOO_LARGE,
)
from ftis.node.swarm.exchange.reasons import TOKENIZER as TOKENIZER_REASON  # the reason, not the fingerprint
from ftis.node.swarm.peers import reputation as reputation_module
from ftis.node.swarm.peers.reputation import (
    FAILED_WEIGHT,
    FILTERED_WEIGHT,
    MISSED_WEIGHT,
    REFUSED_WEIGHT,
    Reputation,
    ReputationSettings,
    mute_length,
    reputation_settings,
    score,
)

SETTINGS = ReputationSettings(half_life_s=100.0, min_evidence=3.0, mute_below=0.3, mute_s=10.0, mute_max_s=35.0)


def snapshot(reputation: Reputation, peer: str, now: float = T0):
    return reputation.snapshot(now)[peer]


# --- the reputation alone ---------------------------------------------------------------------------


def test_a_newcomer_scores_1_and_good_evidence_keeps_it_there():
    reputation = Reputation(SETTINGS)
    assert reputation.snapshot(T0) == {}
    for _ in range(5):
        reputation.delivered("alice", T0)
    judged = snapshot(reputation, "alice")
    assert (judged.score, judged.good, judged.bad, judged.evidence, judged.muted_until) == (1.0, 5.0, 0.0, 5.0, None)


def test_evidence_halves_every_half_life_and_the_score_drifts_back_towards_the_prior():
    reputation = Reputation(SETTINGS)
    for _ in range(4):
        reputation.delivered("alice", T0)
    reputation.failed("alice", T0)  # 4 good, 0.5 bad
    later = snapshot(reputation, "alice", T0 + 2 * SETTINGS.half_life_s)
    assert later.good == pytest.approx(1.0) and later.bad == pytest.approx(0.125)
    assert later.score == pytest.approx(score(1.0, 0.125)) and later.score > score(4.0, 0.5)
    reputation.delivered("alice", T0 + 2 * SETTINGS.half_life_s)  # new evidence adds to the decayed counts
    assert snapshot(reputation, "alice", T0 + 2 * SETTINGS.half_life_s).good == pytest.approx(2.0)


def test_a_peer_is_judged_only_with_min_evidence():
    reputation = Reputation(SETTINGS)
    reputation.refused("mallory", T0)
    reputation.refused("mallory", T0)  # score 1/3 ... but only 2 batches of evidence
    assert snapshot(reputation, "mallory").score == pytest.approx(1 / 3)
    assert not reputation.muted("mallory", T0)
    reputation.refused("mallory", T0)  # the third: judged, 1/4 < 0.3
    assert reputation.muted("mallory", T0)
    assert snapshot(reputation, "mallory").muted_until == T0 + SETTINGS.mute_s


def test_the_threshold_separates_a_mostly_good_peer_from_a_mostly_bad_one():
    reputation = Reputation(SETTINGS)
    for t in range(10):  # 7 delivered, 3 refused: (7 + 1) / 11 = 0.73
        (reputation.refused if t % 3 == 0 and t else reputation.delivered)("fair", T0 + t)
    for t in range(10):  # 2 delivered, 8 refused: 3 / 11 = 0.27
        (reputation.delivered if t in (0, 5) else reputation.refused)("foul", T0 + t)
    assert not reputation.muted("fair", T0 + 10) and reputation.muted("foul", T0 + 10)


def test_refusals_that_say_nothing_about_the_peer_are_no_evidence_and_mute_below_0_mutes_nobody():
    reputation = Reputation(ReputationSettings(100.0, 0.0, 0.0, 10.0, 10.0))
    for _ in range(20):
        reputation.refused("mallory", T0)
    assert not reputation.muted("mallory", T0)  # score 1/21 > 0 = mute_below
    assert snapshot(reputation, "mallory").score == pytest.approx(1 / 21)


def test_an_honest_peer_on_a_flaky_link_is_not_muted():
    # Two retries on a link that loses half of all attempts: one batch in eight still fails.
    reputation = Reputation(reputation_settings(SwarmConfig()))
    now = T0
    for k in range(400):
        now += 30.0
        (reputation.failed if k % 8 == 0 else reputation.delivered)("flaky", now)
        assert not reputation.muted("flaky", now)
    assert snapshot(reputation, "flaky", now).score > 0.9
    # the same defaults mute a peer whose every fetch stalls once it has min_evidence: six failed batches
    for _ in range(6):
        assert not reputation.muted("staller", now)
        reputation.failed("staller", now)
    assert reputation.muted("staller", now)


def test_a_peer_that_misses_half_the_rounds_it_is_waited_for_is_muted_and_one_that_misses_a_fifth_is_not():
    def muted_at(misses) -> int | None:
        """The round at which a peer that misses the rounds ``misses(k)`` says is muted (30 s a round)."""
        reputation = Reputation(reputation_settings(SwarmConfig()))
        for k in range(100):
            (reputation.missed if misses(k) else reputation.delivered)("peer", T0 + 30.0 * k)
            if reputation.muted("peer", T0 + 30.0 * k):
                return k
        return None

    assert muted_at(lambda k: k % 3 != 0) == 2  # delivers one round in three: muted at its second miss
    assert muted_at(lambda k: k % 2 == 1) == 27  # one in two: muted, later
    assert muted_at(lambda k: k % 5 == 4) is None  # misses one in five: never
    assert MISSED_WEIGHT > REFUSED_WEIGHT > FAILED_WEIGHT  # a missed round held the node up to its deadline


def test_the_filter_verdict_weighs_each_batch_the_completions_came_from():
    reputation = Reputation(SETTINGS)
    reputation.filtered("garbage", batches=3, completions=24, filtered=12, now=T0)  # half of 3 batches' worth
    assert snapshot(reputation, "garbage").bad == pytest.approx(FILTERED_WEIGHT * 3 * 0.5)
    reputation.filtered("garbage", batches=1, completions=8, filtered=0, now=T0)  # a clean verdict adds nothing
    reputation.filtered("garbage", batches=2, completions=0, filtered=0, now=T0)  # nothing judged: no evidence
    assert snapshot(reputation, "garbage").bad == pytest.approx(FILTERED_WEIGHT * 1.5)
    for batches, filtered in ((1, 5), (0, 1)):
        with pytest.raises(ValueError, match="filtered"):
            reputation.filtered("garbage", batches=batches, completions=4, filtered=filtered, now=T0)


def test_flooding_does_not_dilute_the_filter_verdict():
    one, many = Reputation(SETTINGS), Reputation(SETTINGS)
    for _ in range(4):  # the same garbage in one batch per step, or in four
        one.delivered("garbage", T0)
        one.filtered("garbage", batches=1, completions=8, filtered=8, now=T0)
        for _ in range(4):
            many.delivered("garbage", T0)
        many.filtered("garbage", batches=4, completions=32, filtered=32, now=T0)
    assert snapshot(one, "garbage").score > snapshot(many, "garbage").score
    assert snapshot(many, "garbage").bad / snapshot(many, "garbage").good == FILTERED_WEIGHT


def test_a_peer_whose_completions_are_all_divergence_filtered_is_muted_on_its_second_batch():
    reputation = Reputation(reputation_settings(SwarmConfig()))
    for round_ in range(2):
        assert not reputation.muted("garbage", T0 + round_)
        reputation.delivered("garbage", T0 + round_)
        reputation.filtered("garbage", batches=1, completions=18, filtered=18, now=T0 + round_)
    assert reputation.muted("garbage", T0 + 1)  # (2 + 1) / (2 + 8 + 1) = 0.27 < 0.3


def test_a_mute_expires_then_needs_new_evidence_and_repeat_mutes_double_up_to_the_cap():
    reputation = Reputation(SETTINGS)
    now = T0
    for _ in range(3):
        reputation.refused("mallory", now)
    assert snapshot(reputation, "mallory", now).muted_until == now + 10
    reputation.refused("mallory", now + 5)  # evidence during a mute counts, but does not extend it
    assert snapshot(reputation, "mallory", now + 9.9).muted_until == now + 10
    now += 10
    judged = snapshot(reputation, "mallory", now)
    assert not reputation.muted("mallory", now) and judged.muted_until is None and judged.mutes == 1
    reputation.refused("mallory", now)  # its record is still bad, but one new batch is not min_evidence
    reputation.refused("mallory", now)
    assert not reputation.muted("mallory", now)
    reputation.refused("mallory", now)  # the third new one: muted again, twice as long
    assert snapshot(reputation, "mallory", now).muted_until == now + 20
    now += 20
    for _ in range(3):
        reputation.refused("mallory", now)
    assert snapshot(reputation, "mallory", now).muted_until == now + 35  # 40, capped at mute_max_s
    assert [mute_length(SETTINGS, k) for k in (1, 2, 3, 4, 1000)] == [10, 20, 35, 35, 35]


def test_a_peer_that_recovers_after_its_mute_is_not_muted_again():
    reputation = Reputation(SETTINGS)
    for _ in range(3):
        reputation.failed("flaky", T0)
        reputation.failed("flaky", T0)  # 3 bad: a burst of stalls
    assert reputation.muted("flaky", T0)
    now = T0 + SETTINGS.mute_s
    for k in range(6):
        reputation.delivered("flaky", now + k)
        assert not reputation.muted("flaky", now + k)


def test_faded_records_are_forgotten_but_a_muted_peers_is_kept():
    reputation = Reputation(SETTINGS)
    reputation.delivered("alice", T0)
    for _ in range(3):
        reputation.refused("mallory", T0)
    reputation.forget_faded(T0 + 5 * SETTINGS.half_life_s)
    assert "alice" in reputation.snapshot(T0)  # 1/32 of a batch is still evidence
    reputation.forget_faded(T0 + 20 * SETTINGS.half_life_s)
    assert list(reputation.snapshot(T0 + 20 * SETTINGS.half_life_s)) == ["mallory"]


def test_records_are_capped_the_oldest_evidence_going_first(monkeypatch):
    monkeypatch.setattr(reputation_module, "MAX_RECORDS", 10)
    reputation = Reputation(SETTINGS)
    for i in range(30):  # thirty identities, each muted, one a second
        for _ in range(3):
            reputation.refused(f"sybil{i}", T0 + i)
    reputation.forget_faded(T0 + 30)
    assert sorted(reputation.snapshot(T0 + 30)) == sorted(f"sybil{i}" for i in range(20, 30))


def test_the_config_defaults_build_the_settings():
    config = SwarmConfig(score_half_life_s=60, score_min_evidence=1, mute_below=0.5, mute_s=5, mute_max_s=50)
    assert reputation_settings(config) == ReputationSettings(60.0, 1.0, 0.5, 5.0, 50.0)


# --- the inbox feeds it and applies it ----------------------------------------------------------------

LIMITS = InboxLimits(max_age_s=60.0, per_peer_quota=64, max_batches=256, max_bytes=1 << 24)


def make_inbox(clock: FakeClock, settings: ReputationSettings = SETTINGS, **limits) -> Inbox:
    return Inbox(RUN_ID, TOKENIZER, InboxLimits(**{**LIMITS.__dict__, **limits}), clock, settings)


def test_deliveries_and_refusals_for_the_peers_fault_feed_its_score():
    clock = FakeClock()
    inbox = make_inbox(clock, ReputationSettings(100.0, 0.0, 0.0, 10.0, 10.0))  # nobody muted here
    for round_ in range(2):
        p = publish(make_batch("alice", round_, clock()))
        assert inbox.consider(p.announcement, p.descriptor)
        inbox.deliver("alice", p.descriptor, p.batch, len(p.data))
    reasons = [HASH_MISMATCH, DECODE_ERROR, TOO_LARGE, FETCH_FAILED]
    for round_, reason in enumerate(reasons):
        p = publish(make_batch("mallory", round_, clock()))
        assert inbox.consider(p.announcement, p.descriptor)
        inbox.fail("mallory", p.descriptor, reason)
    p = publish(make_batch("mallory", 9, clock()))  # a batch other than announced
    assert inbox.consider(p.announcement, p.descriptor)
    inbox.deliver("mallory", p.descriptor, make_batch("mallory", 10, clock()), len(p.data))
    inbox.reject_announcement("forger", b"garbage")
    scores = inbox.scores()
    assert (scores["alice"].good, scores["alice"].bad) == (2.0, 0.0)
    assert (scores["mallory"].good, scores["mallory"].bad) == (0.0, 4 + FAILED_WEIGHT)
    assert (scores["forger"].good, scores["forger"].bad) == (0.0, 1.0)
    assert inbox.stats().rejections[("forger", BAD_ANNOUNCEMENT)] == 1


def test_benign_refusals_are_no_evidence():
    clock = FakeClock()
    inbox = make_inbox(clock, per_peer_quota=1, other_tokenizers=False)
    cases = [make_batch("bob", 0, clock(), run_id="other"), make_batch("bob", 1, clock() - 120),
             make_batch("bob", 2, clock(), tokenizer="tok-b"), make_batch("bob", 3, clock()),
             make_batch("bob", 4, clock())]  # the last one: over bob's quota of 1
    for batch in cases:
        p = publish(batch)
        inbox.consider(p.announcement, p.descriptor)
    counted = {reason for (_, reason) in inbox.stats().rejections}
    assert counted == {OTHER_RUN, STALE, TOKENIZER_REASON, PEER_QUOTA}
    assert inbox.scores() == {}
    inbox2 = make_inbox(clock, max_batches=1)
    for peer in ("bob", "carol"):
        p = publish(make_batch(peer, 0, clock()))
        inbox2.consider(p.announcement, p.descriptor)
    assert set(inbox2.stats().rejections) == {("carol", BUFFER_FULL)} and inbox2.scores() == {}


def test_a_muted_peers_batches_are_refused_unfetched_once_each_until_the_mute_ends():
    clock = FakeClock()
    inbox = make_inbox(clock)
    for round_ in range(3):
        p = publish(make_batch("mallory", round_, clock()))
        assert inbox.consider(p.announcement, p.descriptor)
        inbox.fail("mallory", p.descriptor, HASH_MISMATCH)
    assert inbox.muted("mallory")
    later = publish(make_batch("mallory", 3, clock()))
    for _ in range(3):  # every poll lists it again: one final answer, counted once
        assert not inbox.consider(later.announcement, later.descriptor)
    assert inbox.stats().rejections[("mallory", MUTED)] == 1
    honest = publish(make_batch("alice", 0, clock()))
    assert inbox.consider(honest.announcement, honest.descriptor)  # others are not affected
    clock.advance(SETTINGS.mute_s)
    assert not inbox.muted("mallory")
    fresh = publish(make_batch("mallory", 4, clock()))
    assert inbox.consider(fresh.announcement, fresh.descriptor)  # a new batch after the mute is fetched
    assert not inbox.consider(later.announcement, later.descriptor)  # the refused one stays refused
    muted_until = inbox.scores()["mallory"].muted_until
    assert muted_until is None and inbox.scores()["mallory"].mutes == 1


def test_report_filtered_feeds_the_divergence_verdict():
    clock = FakeClock()
    inbox = make_inbox(clock)
    p = publish(make_batch("garbage", 0, clock()))
    assert inbox.consider(p.announcement, p.descriptor)
    inbox.deliver("garbage", p.descriptor, p.batch, len(p.data))
    inbox.report_filtered("garbage", batches=1, completions=6, filtered=3)
    judged = inbox.scores()["garbage"]
    assert (judged.good, judged.bad) == (1.0, FILTERED_WEIGHT * 0.5)
    assert math.isclose(judged.score, 2 / 4)
