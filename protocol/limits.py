"""Named limits of the protocol. The decoder refuses anything beyond them before building anything;
the transport refuses a payload over ``MAX_PAYLOAD_BYTES`` before reading it."""

# v2: an announcement says how peers reach its peer (``reach``); a batch's body is the same in v1 and v2.
# v3: a batch may carry each completion's text (``texts``); an announcement is the same in v2 and v3.
PROTOCOL_VERSION = 3
SUPPORTED_VERSIONS = frozenset({1, 2, 3})

MAX_PAYLOAD_BYTES = 64 * 1024 * 1024  # one encoded batch
MAX_GROUPS = 4096  # groups in one batch
MAX_GROUP_SIZE = 512  # completions in one group (G)
MAX_PROMPT_TOKENS = 32_768
MAX_COMPLETION_TOKENS = 32_768
MAX_BATCH_TOKENS = 8 * 1024 * 1024  # prompt + completion tokens in one batch
MAX_VOCAB_SIZE = 1 << 24  # token ids travel in at most 3 bytes
MAX_NAME_CHARS = 256  # run, peer, group ids, model names, dataset names, fingerprints
MAX_ANSWER_CHARS = 4096  # a task's gold answer
# A batch's round (its publisher's round, the wire key "seq"): a round a second for 30,000 years stays below
# 2**40, and a node adding one to the largest accepted round still encodes (one near 2**63 would not).
MAX_ROUND = (1 << 40) - 1
# The sampling temperature a batch may claim. The receiver computes its own log-probs at the sampler's
# temperature (logits / T), so T scales its logits: bounded, a claim cannot multiply them by a million.
# GRPO samples at T near 1; below 0.1 a group is nearly greedy and teaches next to nothing.
MIN_TEMPERATURE = 0.1
MAX_TEMPERATURE = 10.0
MAX_MAP_ENTRIES = 32  # keys in any map of the schema
MAX_STRING_BYTES = 4 * MAX_ANSWER_CHARS  # any msgpack string: the longest field, in UTF-8 of up to 4 bytes a character

# A message's shape, checked from its msgpack headers before any object is built (``envelope.py``): an empty array
# or map is 1 byte of msgpack but a ~60-byte Python object, so these bound what unpacking builds, whatever the bytes.
# Depth counts containers, the envelope's map included. The deepest path of either schema holds 4, then a scalar:
# envelope → body → groups → group_id → a string (a batch); envelope → body → batches → a batch's map → an integer,
# or envelope → body → reach → addrs → a string (an announcement).
MAX_DEPTH = 4
# Every value of a batch (containers, keys, scalars): its 9 maps (envelope, body, policy, tokenizer, sampling, groups,
# completions, tokens, texts), each counted at MAX_MAP_ENTRIES keys and as many values, plus the items of its 5
# lists of one item per group (group_id, dataset, split, index, answer). 21,065; the most a valid batch holds is
# 20,559 (4,096 groups), so every valid batch passes; ~1.3 MB of objects at most, besides strings' and binaries'
# own bytes.
MAX_BATCH_VALUES = 9 * (1 + 2 * MAX_MAP_ENTRIES) + 5 * MAX_GROUPS
# A completion's text (v3) may hold at most this many UTF-8 bytes per token of the completion, plus the slack.
# A real token decodes to a few bytes (the longest in Qwen2's vocabulary, runs of spaces or dashes, to a few
# dozen); the bound keeps what a batch's texts inflate to proportional to its tokens, which the limits above
# already bound (still 512 MiB at those limits: a reader weighs ``CompressedBatch.cost`` before inflating). The
# slack spares a completion of a few tokens whose tokens happen to be long ones.
MAX_TEXT_BYTES_PER_TOKEN = 64
MAX_TEXT_SLACK_BYTES = 256

# Sampler log-probs travel quantised: q = round(-logprob / LOGPROB_STEP) as an unsigned integer of
# 1 to 3 bytes, so the absolute error is at most LOGPROB_STEP / 2 < 1e-3 (docs/protocol.md: an error of
# 1e-3 moves an IS ratio by 0.1%).
LOGPROB_STEP = 2.0**-9
MAX_LOGPROB_WIDTH = 3
MIN_LOGPROB = -((1 << (8 * MAX_LOGPROB_WIDTH)) - 1) * LOGPROB_STEP  # about -32768

FINISH_REASONS = ("stop", "length")  # wire code = index
ADAPTERS = ("full", "lora")

# Announcements: the small signed records a peer keeps in the DHT to list its recent batches. The DHT
# process of hivemind 1.1.12 fails on stored values of ~60 KiB, so they stay far below that.
MAX_ANNOUNCEMENT_BYTES = 8 * 1024
# The longest a peer may store its announcement for (its TTL); every node's DHT refuses to store, and every
# reader refuses, a record that expires later than now + this + the allowed clock lead: a peer cannot leave
# behind a member that outlives it.
MAX_ANNOUNCEMENT_TTL_S = 300.0
MAX_CLOCK_AHEAD_S = 60.0  # how far ahead of a node's clock a peer's date may be (hivemind needs < 3 s to bootstrap)
MAX_ANNOUNCED_BATCHES = 16
SHA256_BYTES = 32
# How an announcing peer says it is reached (v2): not known yet; at its own addresses; through relays that hold
# a slot for it, at the circuit addresses it lists (at most MAX_RELAY_ADDRS); "private": AutoNAT found that
# peers outside its own network cannot dial it, and no relay holds a slot for it (peers on its network still
# can: a LAN or one machine); or not at all (client mode: its batches are not fetched, nor waited for).
REACH_HOW = ("unknown", "direct", "relayed", "private", "unreachable")
MAX_RELAY_ADDRS = 4
MAX_MULTIADDR_CHARS = 256
# Every value of an announcement, as for a batch: its maps (envelope, body, reach and one per listed batch), each
# counted at MAX_MAP_ENTRIES keys and values, plus the items of its one list of scalars (reach.addrs). 1,239.
MAX_ANNOUNCEMENT_VALUES = (3 + MAX_ANNOUNCED_BATCHES) * (1 + 2 * MAX_MAP_ENTRIES) + MAX_RELAY_ADDRS
