"""Why a peer's batch was refused, or counted against it: the reasons ``TransportStats.rejections`` counts by peer,
which ``reputation.py`` weighs and ``ftis-node status`` and the dashboard show."""

# Rejection reasons, as counted in TransportStats.rejections.
STALE = "stale"  # created before now - max_age (or dated more than MAX_CLOCK_AHEAD_S ahead of now)
OTHER_RUN = "other_run"
TOKENIZER = "tokenizer"  # another tokenizer fingerprint, where the node skips those (``other_tokenizers``)
PEER_QUOTA = "peer_quota"  # the peer already has its quota of batches in flight or queued
BUFFER_FULL = "buffer_full"
TOO_LARGE = "too_large"  # announced or sent more bytes than allowed
FETCH_FAILED = "fetch_failed"  # unreachable, stalled past the deadline, or closed the stream early
HASH_MISMATCH = "hash_mismatch"
DECODE_ERROR = "decode_error"
NOT_AS_ANNOUNCED = "not_as_announced"  # decoded fine, but not the batch announced: peer, run, round, tokenizer,
# creation time, groups, tokens or policy version differ
BAD_ANNOUNCEMENT = "bad_announcement"  # undecodable, or signed by another key than its peer id's
# Found by the node once a delivered batch is scored (``report_fault``): a group names one of the node's
# problems in front of a prompt that is not that problem's.
PROMPT_MISMATCH = "prompt_mismatch"
NONFINITE = "nonfinite"  # ...or its groups alone made the step's loss or gradient not finite, or made it raise (the
# step was refused)
# ...or a group holds a completion longer than this node samples itself (``generation.max_new_tokens``): never
# trained on, whatever it costs its peer to send (``intake/admission.py``), once a batch
TOO_LONG = "too_long"
SCORING_FAILED = "scoring_failed"  # ...or scoring or rebuilding one of its groups raised: that group is unusable
# Rounds mode: a live peer the node waited for had delivered no batch of the round by the deadline. Counted
# against it at full weight (``reputation.MISSED_WEIGHT``: it held the node's round up to the deadline)...
MISSED_ROUND = "missed_round"
# ...or, where it had been on time for several rounds in a row before (``rounds_barrier.ON_TIME_ROUNDS``), at the
# weight of a failed fetch: a slow link, once, may be to blame.
LATE_ROUND = "late_round"
# Rounds mode: a batch more rounds ahead of the node's than it fetches (``set_round``); asked about again later.
AHEAD = "ahead"

# Peers' clocks differ by seconds (MAX_CLOCK_AHEAD_S, protocol/limits.py). A batch dated further ahead would
# stay "fresh" and in the seen set for as long as its date says: refused, so memory stays bounded.
# Delivered, but in the second half of its fetch deadline: counted with the refusals, though the batch was kept,
# and partly as a failed fetch (a slow peer holds a fetch slot others wait for).
SLOW = "slow"
MUTED = "muted"  # the peer's score fell below swarm.mute_below (reputation.py): not fetched until the mute ends

# Refusals for what the peer sent: evidence against it. FETCH_FAILED counts too, at a lower weight (the
# network may be at fault); the other reasons say nothing about the peer.
PEER_FAULTS = frozenset({TOO_LARGE, HASH_MISMATCH, DECODE_ERROR, NOT_AS_ANNOUNCED, BAD_ANNOUNCEMENT, PROMPT_MISMATCH,
                         NONFINITE, TOO_LONG, SCORING_FAILED})
# Refusals for now: asked about again at each poll, counted once.
WAITING = frozenset({PEER_QUOTA, BUFFER_FULL, AHEAD})
