"""Hostile peers against real nodes on 127.0.0.1: one test per attack.

Run: python -m pytest tests/test_hostile_peers.py -q -s      (marker ``hivemind``; about 45 s; -s prints
the measured figures of the garbage log-prob and flood cases)

One swarm serves the module: a bootstrap DHT peer; ``honest``, a training node (``tiny-small`` on the
digit task of ``helpers/nodes.py``) whose ``HivemindTransport`` only its own rounds drain; ``bob``, an honest
peer with the same tokenizer; and ``mallory`` (``tests/helpers/hostile_peer.py``), a member of the run that
announces, under its own valid signature, whatever each test scripts. Every outcome is read from what
the honest node counted (``TransportStats.rejections``), what mallory was asked for, or what the honest
node trained on.

The effect on training is measured against twins: a ``Node`` built from the same config, started from
the honest node's state just before its round (weights, optimizer, RNG, round) on a ``MemoryTransport``
fed chosen batches. A round is deterministic given its state and inputs, so a twin fed what the honest
node received reproduces its weights bit for bit, and a twin fed something else shows what that changes.

Peers' clocks are ``ShiftedClock``s moved on instead of sleeping; every wait polls under a deadline
that only a broken (or badly overloaded) swarm reaches. Muting is switched off (``mute_below = 0``):
each test sees mallory's batches refused for what they are, not because earlier ones were.
"""

import asyncio
import contextlib
import copy
import dataclasses
import importlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import msgpack
import numpy as np
import psutil
import pytest
import torch
from helpers.hivemind_swarm import DEADLINE_S, Peer, Swarm, delta, rejections_of, start_bootstrap
from helpers.hostile_peer import HostilePeer, forged_record, pushes, serves, stalls, text_bomb
from helpers.nodes import LIMITS, DigitTask, build_node, node_config
from hivemind.p2p import PeerID
from hivemind.utils import get_dht_time

from ftis.node.models.tokenizer import build_tokenizer, tokenizer_fingerprint
from ftis.node.records.round_report import RoundReport
from ftis.node.runner.node import Node, NodeState
from ftis.node.swarm.exchange.reasons import (
    BAD_ANNOUNCEMENT,
    DECODE_ERROR,
    FETCH_FAILED,
    NOT_AS_ANNOUNCED,
    PROMPT_MISMATCH,
    SLOW,
    STALE,
    TOO_LARGE,
)
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.tasks.prompts import prompt_ids
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import pack
from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    encode,
)
from ftis.protocol.announcement import encode_announcement
from ftis.protocol.limits import (
    LOGPROB_STEP,
    MAX_ANNOUNCED_BATCHES,
    MAX_BATCH_TOKENS,
    MAX_GROUP_SIZE,
    MAX_GROUPS,
    MAX_PAYLOAD_BYTES,
    MAX_PROMPT_TOKENS,
    MIN_LOGPROB,
)

pytestmark = pytest.mark.hivemind

decode_module = importlib.import_module("ftis.protocol.decode")  # the package's ``decode`` is the function

RUN = "hostile-test"
FETCH_TIMEOUT_S = 2.0
RETRY_BACKOFF_S = 0.5
MAX_AGE_S = 30.0
SETTINGS = dict(run_id=RUN, host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2, announce_interval_s=1.0,
                announcement_ttl_s=30.0, max_age_s=MAX_AGE_S, fetch_timeout_s=FETCH_TIMEOUT_S, fetch_retries=1,
                fetch_retry_backoff_s=RETRY_BACKOFF_S, per_peer_quota=64, max_buffered_batches=256, mute_below=0.0)
G = 10.0  # the divergence threshold (the default)
CONFIG = node_config(loss={"divergence_threshold": G}, swarm={"run_id": RUN})
TOKENIZER_ = build_tokenizer()  # the tiny models' tokenizer: the honest node's
FINGERPRINT = tokenizer_fingerprint(TOKENIZER_)
VOCAB = len(TOKENIZER_)
TASK = DigitTask()
# A group the digit task scores [1, 0, 1, 0] whatever the claims: letters the honest model finds unlikely
# (so a log-prob claim of 0 diverges from its own by far), with a digit in two of them.
TEXTS = ("QZ7XJK", "QZXJKW", "W3QZXJ", "JKQZXW")
HONEST_REWARDS = [TASK.reward(text, "") for text in TEXTS]


# --- the honest training node ----------------------------------------------------------------------------


class Recorder:
    """The honest node's transport, remembering what each ``receive`` handed its node."""

    def __init__(self, transport):
        self.inner, self.received = transport, []

    def receive(self, max_batches: int | None = None):
        got = self.inner.receive(max_batches)
        self.received += got
        return got

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@dataclasses.dataclass(frozen=True)
class Start:
    """A node's state between rounds, deep-copied: what a twin starts from."""

    weights: dict[str, torch.Tensor]
    state: NodeState
    parameters: torch.Tensor  # the trainable ones, flat (``weights``)


@dataclasses.dataclass
class Honest:
    node: Node
    peer: Peer  # its transport, never polled by the swarm
    recorder: Recorder
    trained: list[list[TrainingGroup]]  # the groups of each optimizer step, in order

    def start(self) -> Start:
        state = {k: v.detach().clone() for k, v in self.node.policy.model.state_dict().items()}
        return Start(state, copy.deepcopy(self.node.state_dict()), weights(self.node))

    def flush(self) -> None:
        """Drop what waits in its inbox, so that its next round trains on what a test sends it."""
        self.peer.transport.receive()

    def delivered(self) -> int:
        return self.peer.transport.stats().delivered_batches

    def rejections(self, peer_id: str) -> dict[str, int]:
        return rejections_of(self.peer.transport, peer_id)


@dataclasses.dataclass
class World:
    swarm: Swarm
    honest: Honest
    bob: Peer
    mallory: HostilePeer


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("hostile")
    swarm = Swarm(start_bootstrap(folder, SETTINGS), SETTINGS)
    try:
        with ThreadPoolExecutor(2) as pool:
            training = pool.submit(swarm.join, 1, tokenizer=FINGERPRINT, polled=False)
            others = pool.submit(swarm.join, 2, tokenizer=FINGERPRINT)
            (peer,) = training.result()
            bob, mallory = others.result()
        recorder = Recorder(peer.transport)
        node = build_node(CONFIG, lambda fingerprint: recorder)
        assert node.policy.fingerprint == FINGERPRINT
        trained: list[list[TrainingGroup]] = []
        step = node.trainer.step

        def recording_step(groups: list[TrainingGroup], own_peer_id: str | None = None):
            trained.append(list(groups))
            return step(groups, own_peer_id)

        node.trainer.step = recording_step
        yield World(swarm, Honest(node, peer, recorder, trained), bob, HostilePeer(mallory, FINGERPRINT))
    finally:
        swarm.close()


# --- batches the honest node can train on --------------------------------------------------------------


def model_logprobs(node: Node, group: Group) -> list[np.ndarray]:
    """The honest model's log-probs of the group's completion tokens at temperature 1, on the wire's grid."""
    columns = group.columns
    packed = pack([TrainingGroup(group.group_id, "", group.prompt_ids, columns, np.zeros(len(columns)), True, 1.0)])
    with torch.no_grad():
        logprobs = completion_logprobs(node.policy.model, packed).numpy()  # (G, T)
    return [np.minimum(np.round(logprobs[i, :n] / LOGPROB_STEP) * LOGPROB_STEP, 0.0)
            for i, n in enumerate(columns.lengths.tolist())]


def digit_group(group_id: str, index: int, texts=TEXTS, *, logprobs: Callable[[Group], list[np.ndarray]] | float,
                claimed: list[float] | None = None, ids: list[list[int]] | None = None, split: str = "train",
                prompt: str | None = None) -> Group:
    """A group for problem ``index`` of the digit task's ``split``; ``logprobs`` is one value for every token or a
    function of the group (with zeros); ``claimed``: the rewards the generator says it gave; ``prompt``: the
    text in front of the completions (default: the problem's own prompt)."""
    problem = TASK.problem(split, index)
    prompt = prompt_ids(TOKENIZER_, TASK.prompt(problem) if prompt is None else prompt, chat=False)
    ids = ids if ids is not None else [TOKENIZER_.encode(text) for text in texts]
    claimed = claimed if claimed is not None else [0.0] * len(ids)

    def build(values: list[np.ndarray]) -> Group:
        completions = tuple(Completion(np.array(t), v, r, "stop") for t, v, r in zip(ids, values, claimed, strict=True))
        return Group(group_id, TaskRef(TASK.name, split, index, problem.answer), prompt, completions)

    if callable(logprobs):
        return build(logprobs(build([np.zeros(len(t)) for t in ids])))
    return build([np.full(len(t), float(logprobs)) for t in ids])


def digit_batch(peer_id: str, round_: int, created_at: float, *, run_id: str = RUN, groups: tuple[Group, ...] = (),
                vocab_size: int = VOCAB, tokenizer: str = FINGERPRINT) -> RolloutBatch:
    """A batch of ``groups`` (one honest-looking group when none are given)."""
    if not groups:
        groups = (digit_group(f"{peer_id}/{round_}", round_ % 10, logprobs=-1.0, claimed=HONEST_REWARDS),)
    return RolloutBatch(run_id, peer_id, round_, created_at, PolicyInfo("tiny-other", "", "full", 0),
                        TokenizerInfo(tokenizer, vocab_size), SamplingSettings(1.0, 1.0, 0, 8), groups)


def reclaimed(batch: RolloutBatch, rewards: list[float]) -> RolloutBatch:
    """``batch`` with every group's claimed rewards replaced by ``rewards``."""
    groups = tuple(Group(g.group_id, g.task, g.prompt_ids, tuple(dataclasses.replace(c, reward=r) for c, r in zip(
        g.completions, rewards, strict=True))) for g in batch.groups)
    return dataclasses.replace(batch, groups=groups)


# --- rounds and twins -----------------------------------------------------------------------------------


def round_with(world: World, data: bytes, **changes: object) -> tuple[RoundReport, RolloutBatch]:
    """Mallory publishes ``data``; once the honest node has it, the node runs a round. Returns the round's
    report and the batch as the honest node received it (asserted to be the round's only peer batch)."""
    honest = world.honest
    honest.flush()
    before = honest.delivered()
    world.mallory.publish(data, **changes)
    world.swarm.wait_until(lambda: honest.delivered() > before, "the honest node has mallory's batch")
    honest.recorder.received.clear()
    report = honest.node.run_round()
    [received] = honest.recorder.received
    assert received.peer_id == world.mallory.peer_id
    return report, received.batch


def twin_round(start: Start, batches: list[RolloutBatch], **loss: object) -> tuple[Node, RoundReport]:
    """A node of the same config (``loss`` changed) from ``start``, whose round receives ``batches``."""
    config = CONFIG.model_copy(update={"loss": CONFIG.loss.model_copy(update=loss)}) if loss else CONFIG
    hub = MemoryHub()
    twin = build_node(config, lambda fingerprint: MemoryTransport(hub, RUN, "twin", fingerprint, LIMITS))
    twin.policy.model.load_state_dict(start.weights)
    twin.load_state_dict(copy.deepcopy(start.state))
    for batch in batches:
        MemoryTransport(hub, RUN, batch.peer_id, FINGERPRINT, LIMITS).publish(batch)
    return twin, twin.run_round()


def weights(node: Node) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in node.policy.model.parameters()])


def max_change(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


# --- 1. forged rewards ----------------------------------------------------------------------------------


def test_forged_rewards_have_no_effect_rewards_are_recomputed(world):
    honest, mallory = world.honest, world.mallory
    start = honest.start()
    # a group the honest model could have sampled (its own log-probs: it passes the filter), every
    # completion claimed correct
    group = digit_group("forged", 3, logprobs=lambda g: model_logprobs(honest.node, g), claimed=[1.0] * len(TEXTS))
    report, received = round_with(world, encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(),
                                                             groups=(group,))))
    assert [c.reward for c in received.groups[0].completions] == [1.0] * len(TEXTS)  # the claims arrived
    [trained] = [g for g in honest.trained[-1] if g.peer_id == mallory.peer_id]
    assert trained.rewards.tolist() == HONEST_REWARDS == [1.0, 0.0, 1.0, 0.0]  # recomputed, not the claims
    assert report.peer_reward == np.mean(HONEST_REWARDS)
    assert report.step.peer_groups == 1  # it was trained on

    # The claims change nothing: the same round fed the same batch claiming the honest rewards...
    twin, _ = twin_round(start, [reclaimed(received, HONEST_REWARDS)])
    assert torch.equal(weights(twin), weights(honest.node))
    # ... while the group itself does change the step (the comparison can fail).
    alone, _ = twin_round(start, [])
    assert not torch.equal(weights(alone), weights(honest.node))


# --- 2. garbage log-probs -------------------------------------------------------------------------------


def test_garbage_logprobs_are_divergence_filtered_and_bounded_by_truncation(world):
    honest, mallory = world.honest, world.mallory
    start = honest.start()
    zero = digit_group("zero", 4, logprobs=0.0, claimed=HONEST_REWARDS)  # "this model is certain of every token"
    extreme = digit_group("extreme", 5, logprobs=MIN_LOGPROB, claimed=HONEST_REWARDS)  # the wire's lowest
    report, received = round_with(world, encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(),
                                                            groups=(zero, extreme))))
    step, attacked = report.step, 2 * len(TEXTS)
    assert step.peer_groups == 2
    assert round(step.filtered_divergence_fraction * step.sequences) == attacked  # every one of them: D > g
    assert step.is_weight_max <= CONFIG.loss.clip_c
    assert torch.isfinite(weights(honest.node)).all()

    without, clean = twin_round(start, [])  # the same round without mallory's batch
    loss_change = step.loss - clean.step.loss
    weight_change = max_change(weights(honest.node), weights(without))
    step_size = max_change(weights(without), start.parameters)
    # Filtered completions still count in the batch mean (docs/loss.md): they only dilute the honest
    # gradient by their share of the completions, which AdamW's normalisation mostly undoes.
    share = attacked / step.sequences
    print(f"\n[hostile] log-prob 0 / {MIN_LOGPROB:.0f} claims (ftis, g={G}): {attacked} of {step.sequences} "
          f"completions filtered ({share:.0%}); loss {step.loss:+.3e} vs {clean.step.loss:+.3e} without them "
          f"({loss_change:+.1e}); max |Δweight| {weight_change:.2e} (the step itself moves weights by up to "
          f"{step_size:.2e})")
    assert weight_change <= step_size / 2

    # With the filter off (tis), the truncation alone bounds them: IS weights ≤ C, weights finite.
    tis, tis_report = twin_round(start, [received], variant="tis")
    assert tis_report.step.filtered_fraction == 0.0 and tis_report.step.peer_groups == 2
    assert tis_report.step.is_weight_max == pytest.approx(CONFIG.loss.clip_c)  # the extreme claims hit C
    assert tis_report.step.truncated_fraction > 0
    assert np.isfinite(tis_report.step.loss) and torch.isfinite(weights(tis)).all()
    tis_change = max_change(weights(tis), weights(without))
    assert weight_change < tis_change  # the filter removes most of what they would change
    print(f"[hostile] same batch under tis (no filter): IS weight max {tis_report.step.is_weight_max:.3f} "
          f"(C={CONFIG.loss.clip_c}), {tis_report.step.truncated_fraction:.0%} of tokens truncated, "
          f"loss {tis_report.step.loss:+.3e}, max |Δweight| {tis_change:.2e} vs without them")


# --- 3. inflated counts ---------------------------------------------------------------------------------


def test_counts_beyond_the_limits_are_refused_before_the_body_is_decoded(world, monkeypatch):
    honest, mallory = world.honest, world.mallory
    # Announced beyond the limits: the whole record is refused, its valid entry included, nothing fetched.
    valid = mallory.describe(encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time())))
    mallory.next_round += 1
    inflations = {
        "groups": lambda body: body["batches"][0].update(groups=MAX_GROUPS + 1),
        "tokens": lambda body: body["batches"][0].update(tokens=MAX_BATCH_TOKENS + 1),
        "bytes": lambda body: body["batches"][0].update(bytes=MAX_PAYLOAD_BYTES + 1),
        "batches": lambda body: body["batches"].extend(
            [dict(body["batches"][0], seq=valid.round + 1 + i) for i in range(MAX_ANNOUNCED_BATCHES)]),
    }
    for what, inflate in inflations.items():
        before = honest.rejections(mallory.peer_id)
        mallory.store(forged_record(mallory.announcement(batches=(valid,)), inflate))
        world.swarm.wait_until(lambda before=before: delta(honest.rejections(mallory.peer_id), before),
                               f"inflated {what}")
        assert delta(honest.rejections(mallory.peer_id), before) == {BAD_ANNOUNCEMENT: 1}, what
    assert not mallory.askers(valid.round)

    # Payloads whose header claims too many groups or completions: refused by the decoder's layout
    # checks, before the token column is read (the spy sees no hostile token column).
    base = msgpack.unpackb(encode(digit_batch(mallory.peer_id, 0, get_dht_time())), raw=False)
    hostile_column = base["body"]["tokens"]["data"]
    token_columns = []
    unpack_columns = decode_module.unpack_columns

    def spy(path, data, *args):
        token_columns.append(bytes(data))
        return unpack_columns(path, data, *args)

    monkeypatch.setattr(decode_module, "unpack_columns", spy)  # encode() decodes too: the base is made before

    def inflated(change: Callable[[dict], None]) -> bytes:
        message = copy.deepcopy(base)
        change(message["body"])
        return msgpack.packb(message, use_bin_type=True)

    def too_many_tokens(body: dict) -> None:
        k = MAX_BATCH_TOKENS // MAX_PROMPT_TOKENS + 1  # full-length prompts: just over the batch's tokens
        body["groups"] = dict(group_id=[f"g{i}" for i in range(k)], dataset=["digits"] * k, split=["train"] * k,
                              index=[0] * k, answer=["0"] * k, size=np.ones(k, "<u4").tobytes(),
                              prompt_length=np.full(k, MAX_PROMPT_TOKENS, "<u4").tobytes())
        body["completions"] = dict(length=np.ones(k, "<u4").tobytes(), reward=np.zeros(k, "<f8").tobytes(),
                                   finish_reason=bytes(k))

    payloads = {
        "groups": inflated(lambda body: body["groups"]["group_id"].extend(f"x{i}" for i in range(MAX_GROUPS))),
        "group size": inflated(lambda body: body["groups"].update(
            size=np.full(1, MAX_GROUP_SIZE + 1, "<u4").tobytes())),
        "completions": inflated(lambda body: body["groups"].update(size=np.full(1, 400, "<u4").tobytes())),
        "tokens": inflated(too_many_tokens),
    }
    for what, data in payloads.items():
        before = honest.rejections(mallory.peer_id)
        round_ = mallory.publish(data).round
        world.swarm.wait_until(lambda before=before: delta(honest.rejections(mallory.peer_id), before),
                               f"a payload of {what}")
        assert delta(honest.rejections(mallory.peer_id), before) == {DECODE_ERROR: 1}, what
        assert len(mallory.asked(honest.peer.peer_id, round_)) == 1
    assert hostile_column not in token_columns

    # Counts within the limits that do not describe the payload: refused once decoded.
    before = honest.rejections(mallory.peer_id)
    mallory.publish(encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time())), groups=2)
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before), "a payload of fewer groups")
    assert delta(honest.rejections(mallory.peer_id), before) == {NOT_AS_ANNOUNCED: 1}


# --- 4. replays -----------------------------------------------------------------------------------------


def test_replayed_batches_are_refused(world):
    honest, bob, mallory = world.honest, world.bob, world.mallory
    honest_id = honest.peer.peer_id
    honest.flush()
    delivered = honest.delivered()
    own = digit_batch(mallory.peer_id, mallory.next_round, get_dht_time() - MAX_AGE_S / 2)
    mallory.publish(encode(own))
    theirs = bob.publish(build=digit_batch)
    world.swarm.wait_until(lambda: honest.delivered() == delivered + 2, "the honest node has both batches")
    before = honest.rejections(mallory.peer_id)

    # The same round again, even with other content: never fetched again (counted nowhere).
    other = encode(dataclasses.replace(own, created_at=get_dht_time()))
    mallory.publish(other, round=own.round)
    # Mallory's old batch under a new round: dated as it is, too old (never fetched); dated now,
    # fetched and refused (its body names another round); re-encoded under the new round but with its old
    # creation time in the body and a fresh one announced, refused too.
    stale = mallory.publish(encode(own), created_at=get_dht_time() - MAX_AGE_S - 5).round
    renamed = mallory.publish(encode(own), created_at=get_dht_time()).round
    backdated = dataclasses.replace(own, round=mallory.next_round, created_at=get_dht_time() - MAX_AGE_S - 5)
    redated = mallory.publish(encode(backdated), created_at=get_dht_time()).round
    # Bob's batch, byte for byte (so the hash is as announced), under mallory's id: dated as it is, and now.
    bobs = mallory.publish(encode(theirs)).round
    bobs_redated = mallory.publish(encode(theirs), created_at=get_dht_time()).round
    # Bob's content re-encoded as mallory's own, new round and date: a batch of mallory's now (accepted).
    adopted = dataclasses.replace(theirs, peer_id=mallory.peer_id, round=mallory.next_round, created_at=get_dht_time())
    mallory.publish(encode(adopted))

    refused = {STALE: 1, NOT_AS_ANNOUNCED: 4}
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before) == refused
                           and honest.delivered() == delivered + 3, "the honest node has judged every replay")
    assert len(mallory.asked(honest_id, own.round)) == 1
    assert not mallory.asked(honest_id, stale)
    for round_ in (renamed, redated, bobs, bobs_redated):
        assert len(mallory.asked(honest_id, round_)) == 1
    got = honest.peer.transport.receive()
    assert sorted((r.peer_id, r.batch.round) for r in got) == sorted(
        [(mallory.peer_id, own.round), (bob.peer_id, theirs.round), (mallory.peer_id, adopted.round)])
    assert honest.rejections(bob.peer_id) == {}  # nothing of this is blamed on bob


def test_a_batch_stamped_with_the_nodes_own_id_is_refused_and_never_counted_as_its_own(world):
    # A step measures the node's own samples apart (StepFigures.own_*) and keeps them out of the peers' evidence
    # (filtered_by_peer), by the groups' peer id: a peer's group that carried the node's own id would hide its
    # filtering from its score. The intake refuses it first: a batch's body must name the peer it came from.
    honest, mallory = world.honest, world.mallory
    honest.flush()
    delivered, before = honest.delivered(), honest.rejections(mallory.peer_id)
    posing = digit_batch(honest.peer.peer_id, mallory.next_round, get_dht_time())
    round_ = mallory.publish(encode(posing)).round
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before) == {NOT_AS_ANNOUNCED: 1},
                           "the honest node has refused the batch in its own name")
    assert len(mallory.asked(honest.peer.peer_id, round_)) == 1  # fetched once, refused on its body, charged
    assert honest.delivered() == delivered
    assert all(received.peer_id != honest.peer.peer_id for received in honest.peer.transport.receive())


# --- 5. a flood of announcements ------------------------------------------------------------------------


def cpu_seconds(transport) -> float:
    """CPU time of a transport: its network thread in this process, its DHT process and that one's p2pd."""
    me = psutil.Process()
    thread = next(t for t in me.threads() if t.id == transport._thread.native_id)
    dht = psutil.Process(transport._dht.pid)
    processes = [dht, *dht.children(recursive=True)]
    return thread.user_time + thread.system_time + sum(sum(p.cpu_times()[:2]) for p in processes)


def memory_bytes(transport) -> int:
    dht = psutil.Process(transport._dht.pid)
    return sum(p.memory_info().rss for p in [dht, *dht.children(recursive=True)])


def test_a_flood_of_announcements_keeps_the_honest_nodes_memory_and_cpu_bounded(world):
    honest, mallory = world.honest, world.mallory
    transport, inbox = honest.peer.transport, honest.peer.transport._inbox
    honest.flush()
    quiet_s = 1.0
    cpu, started = cpu_seconds(transport), time.monotonic()
    time.sleep(quiet_s)
    quiet_cpu = cpu_seconds(transport) - cpu
    seen, memory, cpu, started = len(inbox._seen), memory_bytes(transport), cpu_seconds(transport), time.monotonic()

    def record() -> bytes:
        """16 new batches, never served (a fetch gets "no longer served"); half of them dated a year ahead,
        which would stay "fresh", and in the seen set, for a year."""
        now = get_dht_time()
        batches = tuple(mallory.describe(b"\0", round=mallory.next_round + i, created_at=now + (i % 2) * 3e7)
                        for i in range(MAX_ANNOUNCED_BATCHES))
        mallory.next_round += MAX_ANNOUNCED_BATCHES
        return forged_record(mallory.announcement(batches=batches), lambda body: None)

    records, accepted = mallory.flood(record, seconds=3.0)
    elapsed = time.monotonic() - started
    time.sleep(2 * SETTINGS["poll_interval_s"])  # the last record is read
    flood_cpu = cpu_seconds(transport) - cpu
    seen_after, memory_after = len(inbox._seen), memory_bytes(transport)
    polls = elapsed / SETTINGS["poll_interval_s"]
    print(f"\n[hostile] flood: {records} signed records ({records / elapsed:.0f}/s, {accepted} accepted, "
          f"{records * 16} announced batches) in {elapsed:.1f} s; honest node CPU {flood_cpu:.2f} s "
          f"({flood_cpu / elapsed:.0%} of a core; quiet {quiet_cpu / quiet_s:.0%}); "
          f"seen set {seen} -> {seen_after} entries; DHT+p2pd memory {memory / 2**20:.0f} -> "
          f"{memory_after / 2**20:.0f} MiB")
    # Each poll reads one record per peer: at most 16 new entries a poll, however fast mallory stores.
    assert seen_after - seen <= MAX_ANNOUNCED_BATCHES * (polls + 5)
    assert memory_after - memory < 64 * 2**20
    assert flood_cpu < 1.5 * elapsed  # generous: both cores are shared with the rest of the swarm
    # Once older than the max age, every entry is forgotten, the ones dated ahead included.
    honest.peer.clock.advance(MAX_AGE_S + 70)
    try:
        before = honest.rejections(mallory.peer_id)
        descriptor = mallory.publish(b"\0")  # a record to read: the next consider prunes the seen set
        # wait until its batch got its answer (stale, to the shifted clock: its peer's seen watermark), so that it
        # is not fetched once the clock is back: its bytes would be a decode error, charged during a later test
        # (the flood's own batches turn stale too: the stale count alone does not say this record was read)
        key = (mallory.peer_id, descriptor.round)
        world.swarm.wait_until(lambda: inbox._seen.answered(key, descriptor.created_at)
                               and STALE in delta(honest.rejections(mallory.peer_id), before),
                               "the next record is read")
        assert len(inbox._seen) <= seen + MAX_ANNOUNCED_BATCHES
    finally:
        honest.peer.clock.shift = 0.0


# --- 6. over-size payloads ------------------------------------------------------------------------------


def test_an_over_size_payload_is_refused_without_reading_it(world):
    honest, mallory = world.honest, world.mallory
    p2pd = next(p for p in psutil.Process(honest.peer.transport._dht.pid).children() if p.name() == "p2pd")
    before, read = honest.rejections(mallory.peer_id), p2pd.io_counters().read_chars
    sent: list[int] = []
    announced = encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time()))
    round_ = mallory.publish(announced, pushes(64 * 2**20, sent)).round
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before) and len(sent) == len(
        mallory.askers(round_)), "the honest node refuses the payload")
    assert delta(honest.rejections(mallory.peer_id), before) == {TOO_LARGE: 1}
    assert len(mallory.asked(honest.peer.peer_id, round_)) == 1
    bytes_read = p2pd.io_counters().read_chars - read
    print(f"\n[hostile] over-size: {len(announced)} bytes announced, 64 MiB claimed; mallory pushed "
          f"{max(sent) / 2**20:.1f} MiB before the stream closed; the honest p2pd read {bytes_read / 2**20:.2f} MiB")
    assert bytes_read < 8 * 2**20  # the payload's 64 MiB never crossed


# --- 7. wrong tokenizer claims --------------------------------------------------------------------------


def test_wrong_tokenizer_claims_are_refused_or_skipped(world):
    honest, mallory = world.honest, world.mallory
    honest_id = honest.peer.peer_id
    # Ids at or above the batch's own vocabulary: the decoder refuses it.
    wide = digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(), vocab_size=256,
                       groups=(digit_group("wide", 1, logprobs=-1.0, ids=[[10, 250], [40, 41]]),))
    message = msgpack.unpackb(encode(wide), raw=False)
    message["body"]["tokenizer"]["vocab_size"] = VOCAB  # same id width: only the bound changes
    before = honest.rejections(mallory.peer_id)
    out_of_vocabulary = mallory.publish(msgpack.packb(message, use_bin_type=True)).round
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before), "ids out of the vocabulary")
    assert delta(honest.rejections(mallory.peer_id), before) == {DECODE_ERROR: 1}
    assert len(mallory.asked(honest_id, out_of_vocabulary)) == 1

    # Another tokenizer's fingerprint: fetched (the node trains on other tokenizers' texts), and with no texts in
    # it, unusable: the round scores none of its groups, and says the peer's groups are not used.
    mallory.tokenizer = "sha256:another-tokenizer"
    try:
        report, _ = round_with(world, encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(),
                                                         tokenizer=mallory.tokenizer)))
    finally:
        mallory.tokenizer = FINGERPRINT
    assert (report.unusable_groups, report.peer_groups_received, report.step.peer_groups) == (1, 0, 0)
    assert report.peer_use[mallory.peer_id] == "none"

    # ...and with texts: rebuilt in this node's tokens and trained per sequence. Its log-probs claim the texts
    # were all but impossible to sample (-30,000 a token): every weight stays at C, the divergence filter drops
    # each completion it may (rule "or": all of them, D far above g), the step is finite, and the peer is charged.
    lying = digit_group("other-tokenizer-texts", 3, logprobs=-30_000.0, claimed=HONEST_REWARDS)
    lying = Group(lying.group_id, lying.task, lying.prompt_ids,
                  tuple(dataclasses.replace(c, text=text) for c, text in zip(lying.completions, TEXTS, strict=True)))
    mallory.tokenizer = "sha256:another-tokenizer"
    try:
        before_scores = honest.node.transport.scores().get(mallory.peer_id)
        report, received = round_with(world, encode(digit_batch(
            mallory.peer_id, mallory.next_round, get_dht_time(), tokenizer=mallory.tokenizer, groups=(lying,))))
    finally:
        mallory.tokenizer = FINGERPRINT
    assert received.groups[0].columns.texts == TEXTS
    assert report.peer_use[mallory.peer_id] == "sequence" and report.step.sequence_groups == 1
    assert report.step.trained and math.isfinite(report.step.loss) and report.step.is_weight_max <= CONFIG.loss.clip_c
    assert report.step.filtered_divergence_fraction > 0
    after_scores = honest.node.transport.scores()[mallory.peer_id]
    assert before_scores is None or after_scores.bad > before_scores.bad
    assert torch.isfinite(weights(honest.node)).all()

    # The honest fingerprint with a larger vocabulary claimed, and an id this model has no embedding for:
    # valid on the wire, so delivered; the round skips the group as unusable (it would fail the forward pass).
    beyond = digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(), vocab_size=1000,
                         groups=(digit_group("beyond", 2, logprobs=-1.0, ids=[[10, 500], [40, 41]]),))
    report, _ = round_with(world, encode(beyond))
    assert (report.unusable_groups, report.peer_groups_received, report.step.peer_groups) == (1, 0, 0)
    assert torch.isfinite(weights(honest.node)).all()


# --- 7b. a decompression bomb in the texts ---------------------------------------------------------------


class RssPeak:
    """The largest growth of this process's resident memory over its start, sampled every 2 ms in a thread."""

    def __init__(self) -> None:
        self.process, self.growth, self._stop = psutil.Process(), 0, threading.Event()

    def __enter__(self) -> "RssPeak":
        self.start = self.process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.growth = max(self.growth, self.process.memory_info().rss - self.start)

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()


def test_a_decompression_bomb_is_refused_before_inflating_charged_and_honest_batches_still_arrive(world):
    """512 completions × 16,383 tokens whose texts are one character repeated to the protocol's bound: 26 KB on the
    wire, ~2.7 GB to inflate (texts ~570 MB as bytes, up to 4x as strings; ids and log-probs 160 MB). The honest
    node (another tokenizer: it would read the texts) charges it what decoding takes before inflating a byte,
    which is more than it holds of all its peers' batches: refused (``too_large``) and the peer charged; the
    decode ran on the transport's decoding thread, never on its network loop; bob's batch arrives meanwhile."""
    honest, bob, mallory = world.honest, world.bob, world.mallory
    transport = honest.peer.transport
    honest.flush()
    opened_on: list[str] = []
    inbox_open = transport._inbox.open

    def recording_open(*args):
        opened_on.append(threading.current_thread().name)
        return inbox_open(*args)

    transport._inbox.open = recording_open
    mallory.tokenizer = "sha256:another-tokenizer"
    try:
        bomb = text_bomb(mallory.peer_id, RUN, mallory.next_round, get_dht_time(), mallory.tokenizer)
        before, score = honest.rejections(mallory.peer_id), transport.scores().get(mallory.peer_id)
        delivered = honest.delivered()
        with RssPeak() as peak:
            round_ = mallory.publish(bomb).round
            bob.publish(build=digit_batch)
            world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before), "the bomb is refused")
            world.swarm.wait_until(lambda: honest.delivered() > delivered, "bob's batch arrives")
    finally:
        mallory.tokenizer = FINGERPRINT
        del transport._inbox.open
    print(f"\n[hostile] text bomb: {len(bomb) / 1024:.0f} KiB on the wire; the honest process grew by at most "
          f"{peak.growth / 2**20:.1f} MiB while fetching and refusing it")
    assert delta(honest.rejections(mallory.peer_id), before) == {TOO_LARGE: 1}
    assert len(mallory.asked(honest.peer.peer_id, round_)) == 1  # refused on its contents: never asked again
    assert transport.scores()[mallory.peer_id].bad > (score.bad if score is not None else 0)
    assert peak.growth < 48 * 2**20
    assert opened_on and all(name.startswith("ftis-decode") for name in opened_on)


# --- 8. a stalled fetch ---------------------------------------------------------------------------------


def test_a_stalled_fetch_costs_one_deadline_per_attempt_while_the_node_trains_on(world):
    honest, bob, mallory = world.honest, world.bob, world.mallory
    honest_id = honest.peer.peer_id
    honest.flush()
    before = honest.rejections(mallory.peer_id)
    round_ = mallory.publish(encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time())), stalls).round
    world.swarm.wait_until(lambda: mallory.asked(honest_id, round_), "the honest node is fetching the stalled batch")
    marker = bob.publish(build=digit_batch).round
    delivered = honest.delivered()
    world.swarm.wait_until(lambda: honest.delivered() > delivered, "the honest node has bob's batch meanwhile")
    honest.recorder.received.clear()
    report = honest.node.run_round()  # trains while mallory's fetch hangs: a round never waits on the network
    assert [(r.peer_id, r.batch.round) for r in honest.recorder.received] == [(bob.peer_id, marker)]
    assert report.peer_groups_by_peer == {bob.peer_id: 1}

    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before),
                           "the honest node gives up on mallory", timeout=DEADLINE_S)
    failed_at = time.monotonic()
    assert delta(honest.rejections(mallory.peer_id), before) == {FETCH_FAILED: 1}
    first, second = mallory.asked(honest_id, round_)  # one retry (fetch_retries = 1), then it is skipped
    # One deadline per attempt and a backoff between them (slack for a loaded machine), then no more.
    assert RETRY_BACKOFF_S <= second - first < FETCH_TIMEOUT_S + RETRY_BACKOFF_S + 2.0
    assert failed_at - first >= FETCH_TIMEOUT_S + RETRY_BACKOFF_S
    assert failed_at - second < FETCH_TIMEOUT_S + 2.0


# --- 9. a prompt that is not its problem's, a problem of the held-out split -----------------------------


def test_groups_are_trained_on_only_with_their_own_problems_prompt_from_the_training_split(world):
    # The node scores a group with the gold answer of the problem it names, so a prompt in front of it that is
    # not that problem's would teach the node that answer for a question it never asked; a problem of the
    # held-out split would train it on its own evaluation set.
    honest, mallory = world.honest, world.mallory
    own_logprobs = lambda g: model_logprobs(honest.node, g)  # noqa: E731 - passes the filter
    fair = digit_group("fair", 3, logprobs=own_logprobs)
    swapped = digit_group("swapped", 3, logprobs=own_logprobs, prompt="say 8, then say 3:")
    held_out = digit_group("held-out", 3, logprobs=own_logprobs, split="test")
    before = honest.rejections(mallory.peer_id)
    report, received = round_with(world, encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(),
                                                            groups=(fair, swapped, held_out))))
    assert len(received.groups) == 3  # all three arrived, valid on the wire
    assert [g.group_id for g in honest.trained[-1] if g.peer_id == mallory.peer_id] == ["fair"]
    assert report.unusable_groups == 2 and report.peer_groups_received == 1
    assert delta(honest.rejections(mallory.peer_id), before) == {PROMPT_MISMATCH: 1}  # charged once for the batch
    assert honest.peer.transport.scores()[mallory.peer_id].bad > 0

    # The chat-template form of a problem's prompt is as good as the raw one (peers may choose either): the
    # tiny tokenizer has no template, so its only form is the raw text; a re-encoding of that text is accepted.
    again = digit_group("again", 4, logprobs=own_logprobs, prompt=TASK.prompt(TASK.problem("train", 4)))
    report, _ = round_with(world, encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time(),
                                                     groups=(again,))))
    assert report.unusable_groups == 0 and report.peer_groups_received == 1


# --- 10. a ghost member: an announcement that never goes away ---------------------------------------------


def test_an_announcement_dated_ahead_is_refused_and_charged(world):
    # A member that lists no batch stays "live" for as long as its date says; rounds-mode nodes would wait for
    # it every round. (One stored to expire in a year is refused by every DHT peer: test_swarm_hivemind.py.)
    honest, mallory = world.honest, world.mallory
    transport = honest.peer.transport

    def members() -> set[str]:
        return {member.peer_id for member in transport.members()}

    mallory.store(encode_announcement(mallory.announcement()))
    world.swarm.wait_until(lambda: mallory.peer_id in members(), "mallory is a member")
    before = honest.rejections(mallory.peer_id)
    mallory.store(encode_announcement(mallory.announcement(batches=(), updated_at=1e11)))
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before), "the dated record is read")
    assert delta(honest.rejections(mallory.peer_id), before) == {BAD_ANNOUNCEMENT: 1}
    world.swarm.wait_until(lambda: mallory.peer_id not in members(), "mallory is no member")


# --- 11. a flood of fetches that never read --------------------------------------------------------------


def big_batch(peer_id: str, round_: int, created_at: float, *, run_id: str = RUN) -> RolloutBatch:
    """A valid batch of ~2.6 MB: 64 groups of 8 completions of 2,048 random tokens."""
    rng = np.random.default_rng(round_)
    groups = tuple(Group(f"{peer_id}/{round_}/{g}", TaskRef("digits", "train", g, str(g)), np.array([1, 2, 3]), tuple(
        Completion(rng.integers(0, VOCAB, 2048), -rng.integers(0, 4096, 2048) * LOGPROB_STEP, 0.0, "length")
        for _ in range(8))) for g in range(64))
    return RolloutBatch(run_id, peer_id, round_, created_at, PolicyInfo("tiny-other", "", "full", 0),
                        TokenizerInfo(FINGERPRINT, VOCAB), SamplingSettings(1.0, 1.0, 0, 2048), groups)


def test_streams_that_never_read_hold_two_serving_slots_and_no_copies(world):
    # A hundred streams from one identity, each asking for a 2.6 MB batch of bob's and never reading: bob
    # serves two of them (its share per peer) and turns the rest away; nothing is copied per request, and the
    # honest node still fetches bob's next batch meanwhile.
    honest, bob, mallory = world.honest, world.bob, world.mallory
    got: list[int] = []  # bob's batches the honest node received

    def received(round_: int) -> bool:
        got.extend(r.batch.round for r in honest.peer.transport.receive() if r.peer_id == bob.peer_id)
        return round_ in got

    honest.flush()
    batch = bob.publish(build=big_batch)
    size = len(encode(batch))
    assert size > 2 * 2**20
    world.swarm.wait_until(lambda: received(batch.round), "the honest node has bob's big batch")
    transport = mallory.peer.transport
    target, before = PeerID.from_base58(bob.peer_id), bob.transport.stats().serves_turned_away
    rss = psutil.Process().memory_info().rss

    async def open_unread(count: int) -> list[asyncio.StreamWriter]:
        writers = []
        for _ in range(count):
            _, _, writer = await transport._p2p.call_binary_stream_handler(target, transport._handler)
            writers.append(writer)
            with contextlib.suppress(ConnectionError):  # turned away: bob closed it already
                writer.write(batch.round.to_bytes(8, "big"))
                await writer.drain()
        return writers

    writers = asyncio.run_coroutine_threadsafe(open_unread(100), transport._loop).result(60)
    try:
        world.swarm.wait_until(lambda: bob.transport.stats().serves_turned_away - before >= 98,
                               "bob turns the other streams away")
        time.sleep(1.0)  # what bob would buffer for the streams it serves
        grown = psutil.Process().memory_info().rss - rss
        following = bob.publish(build=digit_batch)
        world.swarm.wait_until(lambda: received(following.round), "the honest node has bob's next batch")
    finally:
        asyncio.run_coroutine_threadsafe(_close_all(writers), transport._loop).result(10)
    turned_away = bob.transport.stats().serves_turned_away - before
    print(f"\n[hostile] 100 unread fetches of a {size / 2**20:.1f} MB batch: {turned_away} turned away; "
          f"this process grew by {grown / 2**20:.1f} MiB meanwhile")
    assert turned_away == 98
    assert grown < 3 * size  # a copy per stream would be 100 copies


async def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()


# --- 12. batches dated ahead -----------------------------------------------------------------------------


def test_a_batch_dated_ahead_gains_no_turn_in_the_mix():
    config = CONFIG.model_copy(update={"mix": CONFIG.mix.model_copy(update={"max_peer_groups": 1,
                                                                             "max_peer_share": 1.0})})
    hub = MemoryHub()
    node = build_node(config, lambda fingerprint: MemoryTransport(hub, RUN, "node", fingerprint, LIMITS))
    now = time.time()
    # mallory dates its batch 59 s ahead (within the clock lead the inbox allows) to be ranked freshest
    ahead = digit_batch("mallory", 0, now + 59, groups=(digit_group("ahead", 3, logprobs=-1.0),))
    fair = digit_batch("bob", 0, now, groups=(digit_group("fair", 4, logprobs=-1.0),))
    for batch in (ahead, fair):
        MemoryTransport(hub, RUN, batch.peer_id, FINGERPRINT, LIMITS).publish(batch)
    report = node.run_round()
    assert report.peer_groups_received == 2
    assert report.peer_groups_by_peer == {"bob": 1}  # a date after its arrival ranks mallory's as the stalest


# --- 13. a slow but valid peer --------------------------------------------------------------------------


def serves_after(seconds: float):
    async def behaviour(fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        payload: bytes) -> None:
        await asyncio.sleep(seconds)
        await serves(fetcher, reader, writer, payload)

    return behaviour


def test_a_slow_but_valid_peer_is_charged_for_its_lateness(world):
    # Mallory serves valid batches late in the fetch deadline (its payloads are small: the deadline is
    # fetch_timeout_s): each one is kept, and counted partly as a failed fetch.
    honest, mallory = world.honest, world.mallory
    honest.flush()
    before, score = honest.rejections(mallory.peer_id), honest.peer.transport.scores().get(mallory.peer_id)
    bad_before = score.bad if score is not None else 0.0
    rounds = [mallory.publish(encode(digit_batch(mallory.peer_id, mallory.next_round, get_dht_time())),
                            serves_after(0.8 * FETCH_TIMEOUT_S)).round for _ in range(2)]
    world.swarm.wait_until(lambda: delta(honest.rejections(mallory.peer_id), before).get(SLOW, 0) == 2,
                           "both late deliveries are counted")
    assert sorted(r.batch.round for r in honest.peer.transport.receive() if r.peer_id == mallory.peer_id) == rounds
    assert honest.peer.transport.scores()[mallory.peer_id].bad > bad_before
