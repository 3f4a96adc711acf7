"""Faults on a real swarm on 127.0.0.1 (marker ``hivemind``), each checked for its outcome.

Run: python -m pytest tests/test_faults.py -q   (2.5 min on 2 cores at load 15: mostly three `ftis-node join` starts)

The faults, and what must happen:
- a node SIGKILLed inside its optimizer step, or while it writes a checkpoint: every checkpoint it leaves
  verifies, a half-written one is never listed and is removed by the next save, and ``--resume``
  continues from the last completed round (at most the round under way is lost);
- a peer killed mid-transfer: each fetch attempt ends by its deadline, the batch is counted
  ``fetch_failed``, and the others' batches keep coming;
- a partition (a peer cut off, its announcement still in the DHT): each fetch of its batches ends at its
  deadline and is counted ``fetch_failed``, nothing hangs, and once its announcement expires it is no
  longer listed nor asked;
- the bootstrap dies: the others keep exchanging, and a new node joins through the address a member
  printed.

One swarm serves the module, started at once: a bootstrap DHT peer; alice and bob, in this process; a
training node, ``ftis-node join`` as a user runs it (the first test kills and resumes it, and it trains on
through the later tests); and two peers in their own processes (``tests/helpers/fault_peer.py``): ``doomed``, which
serves its payload slowly and is killed mid-transfer, and ``islander``, which is cut off with SIGSTOP.
The bootstrap is killed in the last test. Every wait polls until its condition holds, under a deadline
only a broken (or badly overloaded) swarm reaches.
"""

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import reap
from helpers.child_lines import read_lines, wait_for_line
from helpers.cli_process import CliProcess
from helpers.digit_model import digit_model, write_node_config
from helpers.hivemind_swarm import DEADLINE_S, Peer, Swarm, kill_tree, start_bootstrap

from ftis.node.runner.checkpoint_files import list_checkpoints, read_checkpoint
from ftis.node.swarm.dht.directory import Directory, read_shards
from ftis.node.swarm.exchange.reasons import FETCH_FAILED

pytestmark = pytest.mark.hivemind

RUN = "faults-test"
FETCH_TIMEOUT_S = 3.0
RETRY_BACKOFF_S = 0.5
SLACK_S = 3.0  # a loaded machine's delay on top of a deadline
ISLANDER_TTL_S = 10.0  # the cut-off peer's announcement lapses this long after its last renewal
SETTINGS = dict(run_id=RUN, host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2, announce_interval_s=1.0,
                announcement_ttl_s=30.0, max_age_s=60.0, fetch_timeout_s=FETCH_TIMEOUT_S, fetch_retries=1,
                fetch_retry_backoff_s=RETRY_BACKOFF_S, per_peer_quota=64, max_buffered_batches=256)
START_S = 120.0  # a new process imports torch first: ~3 s idle, far longer on a loaded machine
TESTS = Path(__file__).parent  # the peer runs as ``python -m helpers.fault_peer`` from here


# --- helpers -----------------------------------------------------------------------------------------


def lists(peer: Peer, peer_id: str) -> bool:
    """Whether ``peer``'s latest reading of the DHT lists ``peer_id`` as a member."""
    return peer_id in {m.peer_id for m in peer.transport.members()}


def announced_rounds(swarm: Swarm, peer_id: str) -> set[int]:
    """The rounds ``peer_id``'s announcement lists in the DHT now (empty: none there)."""
    values = read_shards(swarm.bootstrap, swarm.config.run_id, swarm.config.shards).result()
    return {d.round for a in Directory().read(values).announcements if a.peer_id == peer_id for d in a.batches}


def family(pid: int) -> list[psutil.Process]:
    """A process and all it started (its DHT process and ``p2pd``), to reap once it is killed."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


# --- peers in their own processes ---------------------------------------------------------------------


class PeerProcess:
    """``tests/helpers/fault_peer.py``: told to publish on its stdin; its stdout lines are collected as they come."""

    def __init__(self, maddr: str, log: Path, *args: str):
        self.log = log
        with log.open("w") as stderr:  # hivemind's log
            self.process = subprocess.Popen(
                [sys.executable, "-m", "helpers.fault_peer", "--peer", maddr, "--run-id", RUN, *args], cwd=TESTS,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.lines = read_lines(self.process)
        self._peer_id: str | None = None

    def wait_for(self, prefix: str, timeout: float = DEADLINE_S) -> str:
        return wait_for_line(self.process, self.lines, prefix, timeout, self.log)

    def peer_id(self) -> str:
        if self._peer_id is None:
            self._peer_id = self.wait_for("peer ", START_S).split()[1]
        return self._peer_id

    def publish(self) -> None:
        self.peer_id()
        self.process.stdin.write("publish\n")
        self.process.stdin.flush()
        self.wait_for("published ")

    def stop(self) -> None:
        """SIGTERM (its handler shuts the DHT down); SIGKILL for everything it started if that fails."""
        if self.process.poll() is None:
            processes = family(self.process.pid)
            for process in processes:
                process.resume()  # a stopped process cannot handle SIGTERM
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                reap(processes)


# --- the training node --------------------------------------------------------------------------------


def write_config(path: Path, model: Path) -> Path:
    """A node whose optimizer step takes most of its round (many groups, one-token completions, one group
    per micro-batch): a kill soon after it publishes lands in its step. A checkpoint after every round."""
    return write_node_config(path, model, RUN, generation={"prompts_per_round": 32, "group_size": 64},
                             trainer={"max_tokens_per_microbatch": 64}, swarm={"announce_interval_s": 1.0},
                             checkpoint={"keep_last": 3})


class Trainer:
    """``ftis-node join`` in a subprocess, started again with ``--resume`` after each kill."""

    def __init__(self, config: Path, out: Path, bootstrap: str):
        self.config, self.out, self.bootstrap = config, out, bootstrap
        self.checkpoints = out / "checkpoints"
        self.process: CliProcess | None = None
        self.start(resume=False)

    def start(self, resume: bool) -> None:
        self.process = CliProcess("join", "--config", str(self.config), "--out", str(self.out),
                                  "--peer", self.bootstrap, *(["--resume"] if resume else []))
        self.first_round = 0  # resume() sets the round it continues from

    def line(self, matches: Callable[[str], bool], timeout: float = START_S) -> str:
        """The first line of the current process's output that ``matches``, once it has printed it."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((line.strip() for line in list(self.process.lines) if matches(line)), None)
            if found is not None:
                return found
            assert self.process.process.poll() is None, self.process.output
            assert time.monotonic() < deadline, f"no such line within {timeout:.0f} s:\n{self.process.output}"
            time.sleep(0.05)

    def peer_id(self) -> str:
        return self.line(lambda line: line.startswith("node ")).split()[1]

    def maddr(self) -> str:
        """The address it prints for others to join through."""
        return self.line(lambda line: "--peer" in line and "/p2p/" in line).split()[-1]

    def announced_round(self, member: Peer) -> int | None:
        """The round of the newest batch this process has announced, as ``member`` last read it (one batch a
        round, and a process counts the batches it published)."""
        for found in member.transport.members():
            if found.peer_id == self.peer_id():
                return self.first_round + found.published_batches - 1
        return None

    def rounds(self) -> list[int]:
        """The rounds ``metrics.jsonl`` records as completed, in order (a resumed round appears again)."""
        path = self.out / "metrics.jsonl"
        text = path.read_text() if path.exists() else ""
        return [json.loads(line)["round"] for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def kill(self) -> None:
        """SIGKILL, and its DHT process and ``p2pd``, which no handler shuts down: a machine going down."""
        kill_tree(self.process.process.pid)
        self.process.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.process.poll() is None:
            processes = family(self.process.process.pid)
            self.process.process.terminate()
            try:
                self.process.process.wait(60)
            except subprocess.TimeoutExpired:
                reap(processes)


# --- the swarm ----------------------------------------------------------------------------------------


@dataclass
class World:
    swarm: Swarm
    alice: Peer
    bob: Peer
    trainer: Trainer
    doomed: PeerProcess  # serves slowly; killed mid-transfer
    islander: PeerProcess  # cut off


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("faults")
    model = digit_model(folder / "digit-model")
    swarm = Swarm(start_bootstrap(folder, SETTINGS), SETTINGS)
    maddr = swarm.maddrs[0]
    processes: list[Trainer | PeerProcess] = []
    # One torch thread per process: on a small, loaded machine more make OpenMP threads spin against each other.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        try:
            processes.append(Trainer(write_config(folder / "node.toml", model), folder / "node", maddr))
            processes.append(PeerProcess(maddr, folder / "doomed.log", "--groups", "256", "--group-size", "128",
                                         "--chunk-pause", "0.05"))
            processes.append(PeerProcess(maddr, folder / "islander.log", "--ttl", str(ISLANDER_TTL_S)))
            alice, bob = swarm.join(2)  # while the processes import torch
            yield World(swarm, alice, bob, *processes)
        finally:
            for process in processes:
                process.stop()
            swarm.close()


# --- a node killed ------------------------------------------------------------------------------------


def kill_inside_step(world: World, delay_s: float) -> tuple[int, bool]:
    """SIGKILL the training node ``delay_s`` after it announced a round's batch, before that round ends;
    returns the round and whether the kill landed before the round's end. Between the publish and the end
    of a round there is only the scoring of its own groups (milliseconds) and its optimizer step (most of a
    second): the kill lands in the step. A round that ends before the kill could be sent (a slow
    announcement on a loaded machine) is passed over; one that ends between the last look and the kill
    (the race every such test has) is reported as not landed."""
    trainer = world.trainer
    done = trainer.rounds()
    target = max(done[-1] + 1 if done else 0, 1)  # round 0 leaves the first checkpoint: kill after it
    deadline = time.monotonic() + START_S
    while True:
        assert trainer.process.process.poll() is None, trainer.process.output
        assert time.monotonic() < deadline, f"no round's step could be caught:\n{trainer.process.output}"
        if target in trainer.rounds():
            target += 1  # it ended before we saw its batch announced
        elif (trainer.announced_round(world.alice) or -1) >= target:
            time.sleep(delay_s)
            if target not in trainer.rounds():
                trainer.kill()
                break
            target += 1
        time.sleep(0.02)
    return target, target not in trainer.rounds()  # landed: its step never finished


def kill_inside_save(world: World) -> list[Path]:
    """SIGKILL the training node the moment a checkpoint's staging folder appears; returns the hidden folders
    left behind (empty when the save finished first)."""
    trainer, deadline = world.trainer, time.monotonic() + START_S
    while not any(p.name.startswith(".tmp-") for p in trainer.checkpoints.iterdir()):
        assert trainer.process.process.poll() is None, trainer.process.output
        assert time.monotonic() < deadline, f"no checkpoint save began:\n{trainer.process.output}"
        time.sleep(0.002)
    trainer.kill()
    return [p for p in trainer.checkpoints.iterdir() if p.name.startswith(".")]


def resume(world: World) -> int:
    """Start the killed node again with ``--resume``; returns the round it continues from."""
    trainer = world.trainer
    listed = list_checkpoints(trainer.checkpoints)
    for path in listed:  # every checkpoint a kill left is whole: its hashes and files verify
        read_checkpoint(path)
    newest = read_checkpoint(listed[-1])
    recorded = len(trainer.rounds())
    trainer.start(resume=True)
    line = trainer.line(lambda line: line.startswith("resumed from "))
    assert line == f"resumed from {newest.path}: round {newest.round}, policy v{newest.policy_version}"
    assert "damaged" not in trainer.process.output
    trainer.first_round = newest.round
    assert wait_for_round(trainer, newest.round, recorded)[recorded] == newest.round  # the first one it records
    return newest.round


def wait_for_round(trainer: Trainer, round_: int, recorded: int = 0) -> list[int]:
    """The rounds ``metrics.jsonl`` records, once it holds more than ``recorded`` lines, the newest for
    ``round_`` or a later round."""
    deadline = time.monotonic() + START_S
    while len(rounds := trainer.rounds()) <= recorded or rounds[-1] < round_:
        assert trainer.process.process.poll() is None, trainer.process.output
        assert time.monotonic() < deadline, f"round {round_} did not complete:\n{trainer.process.output}"
        time.sleep(0.05)
    return rounds


def test_a_node_killed_inside_its_step_or_its_checkpoint_resumes_from_its_last_completed_round(world):
    trainer = world.trainer
    maddr = trainer.maddr()  # it prints the addresses others can join through
    assert maddr.startswith("/ip4/127.0.0.1/tcp/") and maddr.endswith(f"/p2p/{trainer.peer_id()}"), maddr

    # Killed inside a step: the checkpoint of the round before stands, and the node redoes only this round.
    for _ in range(3):
        killed, landed = kill_inside_step(world, delay_s=0.05)
        if landed:
            assert list_checkpoints(trainer.checkpoints)[-1].name == f"round-{killed:08d}"
            assert resume(world) == killed
            break
        resume(world)  # the round ended just before the kill: its checkpoints verify all the same; again
    assert landed, "three kills in a row came just after a round's end"

    # Killed while a checkpoint is written: the half-written one is hidden, never listed, and removed
    # by the next save; the node resumes from the newest whole one, at most the round just completed lost.
    leftovers = kill_inside_save(world)
    completed = trainer.rounds()[-1]
    continued = resume(world)
    assert continued in (completed, completed + 1)
    deadline = time.monotonic() + DEADLINE_S
    while f"checkpoint {trainer.checkpoints / f'round-{continued + 1:08d}'}" not in trainer.process.output:
        assert time.monotonic() < deadline, f"no checkpoint after the resume:\n{trainer.process.output}"
        time.sleep(0.05)
    assert not any(p.exists() for p in leftovers)
    assert [p.name for p in trainer.checkpoints.iterdir() if p.name.startswith(".")] == []


# --- a peer killed mid-transfer, a peer cut off -------------------------------------------------------


def test_a_peer_killed_mid_transfer_costs_its_fetchers_at_most_a_deadline_per_attempt(world):
    doomed, fetchers = world.doomed, [world.alice, world.bob]
    peer_id = doomed.peer_id()
    doomed.publish()  # ~0.5 MB, trickled out in 16 KiB chunks: about 1.5 s to serve
    doomed.wait_for("serving ")
    processes = family(doomed.process.pid)
    doomed.process.kill()  # the Python process only, as the kernel's OOM killer would: p2pd is orphaned
    killed_at = time.monotonic()
    doomed.process.wait(10)
    said = []
    while not doomed.lines.empty():
        said.append(doomed.lines.get())
    assert not any(line.startswith("served ") for line in said), said  # it died mid-transfer

    sent = {peer.peer_id: peer.publish().round for peer in fetchers}
    failed_at: dict[str, float] = {}

    def settled() -> bool:
        for peer in fetchers:
            if peer.peer_id not in failed_at and peer.rejections(peer_id):
                failed_at[peer.peer_id] = time.monotonic()
        alice, bob = fetchers
        return (len(failed_at) == len(fetchers) and sent[bob.peer_id] in alice.got(bob.peer_id)
                and sent[alice.peer_id] in bob.got(alice.peer_id))

    world.swarm.wait_until(settled, "both fetchers give up on the dead peer and get each other's batch")
    for peer in fetchers:
        assert peer.rejections(peer_id) == {FETCH_FAILED: 1}
        assert peer.got(peer_id) == []
        # The attempt under way when it died, then one retry (its announcement still lists the batch): each
        # ends at its deadline at the latest, with a backoff between them.
        assert failed_at[peer.peer_id] - killed_at < 2 * FETCH_TIMEOUT_S + RETRY_BACKOFF_S + SLACK_S
    reap(processes)


def test_a_peer_cut_off_with_its_announcement_still_up_is_skipped_until_the_announcement_expires(world):
    islander, bob, trainer = world.islander, world.bob, world.trainer
    peer_id = islander.peer_id()
    for _ in range(3):
        islander.publish()
    deadline = time.monotonic() + DEADLINE_S
    while announced_rounds(world.swarm, peer_id) != {0, 1, 2}:
        assert time.monotonic() < deadline, "the islander's announcement never listed its three batches"
        time.sleep(0.05)
    for process in family(islander.process.pid):  # SIGSTOP it, its DHT process and its p2pd: nothing answers
        process.suspend()  # and nothing is renewed
    rounds = trainer.rounds()

    (fetcher,) = world.swarm.join(1)  # joins during the partition: it has none of the islander's batches
    marker = bob.publish().round
    seen_at, failed_at = [], []

    def skipped() -> bool:
        if not seen_at and lists(fetcher, peer_id):
            seen_at.append(time.monotonic())
        if not failed_at and fetcher.rejections(peer_id).get(FETCH_FAILED) == 3:
            failed_at.append(time.monotonic())
        return bool(failed_at) and marker in fetcher.got(bob.peer_id)

    world.swarm.wait_until(skipped, "the fetcher gives up on the islander's batches and gets bob's")
    assert seen_at, "the fetcher never saw the islander's announcement"
    assert fetcher.rejections(peer_id) == {FETCH_FAILED: 3}
    assert fetcher.got(peer_id) == []
    # Its three batches are fetched concurrently, each attempt ending at its deadline, then retried once.
    assert failed_at[0] - seen_at[0] < 2 * FETCH_TIMEOUT_S + RETRY_BACKOFF_S + SLACK_S

    world.swarm.wait_until(lambda: not lists(fetcher, peer_id), "the islander's announcement expires",
                           timeout=ISLANDER_TTL_S + DEADLINE_S)
    before, marker = fetcher.rejections(peer_id), bob.publish().round
    world.swarm.wait_until(lambda: marker in fetcher.got(bob.peer_id), "the fetcher polls on")
    assert fetcher.rejections(peer_id) == before  # nothing of the islander's is asked for any more
    wait_for_round(trainer, rounds[-1] + 1)  # the training node trained on throughout
    kill_tree(islander.process.pid)  # SIGKILL ends stopped processes too
    islander.process.wait(10)


# --- the bootstrap killed (last: nothing after it needs the bootstrap) --------------------------------


def test_after_the_bootstrap_dies_the_others_keep_exchanging_and_a_new_node_joins_through_a_member(world):
    alice, bob, trainer = world.alice, world.bob, world.trainer
    kill_tree(world.swarm.bootstrap.pid)
    world.swarm.bootstrap.join(10)  # reaps it; shutdown() is then a no-op
    rounds = trainer.rounds()
    sent = {peer.peer_id: peer.publish().round for peer in (alice, bob)}
    world.swarm.wait_until(lambda: sent[bob.peer_id] in alice.got(bob.peer_id)
               and sent[alice.peer_id] in bob.got(alice.peer_id), "alice and bob exchange after the bootstrap died")

    # A new node knows only the address the training node printed, not the bootstrap's.
    (newcomer,) = world.swarm.join(1, initial_peers=[trainer.maddr()])
    own = newcomer.publish().round
    world.swarm.wait_until(lambda: all(sent[p.peer_id] in newcomer.got(p.peer_id) for p in (alice, bob))
               and all(own in p.got(newcomer.peer_id) for p in (alice, bob)) and lists(newcomer, trainer.peer_id()),
               "the newcomer exchanges with alice and bob and sees the training node")
    wait_for_round(trainer, rounds[-1] + 1)  # which trains on
