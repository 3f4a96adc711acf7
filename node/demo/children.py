"""The processes the demo starts, and stopping every one of them.

    children = Children(stop_timeout_s=30)
    node = children.start("small", ["ftis-node", "join", ...], log=out / "small" / "node.log", env=env)
    ...
    children.stop_all()  # in a finally: SIGTERM, wait, SIGKILL; nothing of theirs is left running

Each child runs in a process group of its own (``process_group=0``), for two reasons: Ctrl-C on the
terminal reaches the demo alone, which then stops each child once, in order, with SIGTERM (a child
that got SIGINT from the terminal *and* SIGTERM from the demo could be cut short inside its own
shutdown); and a node's DHT process and ``p2pd`` are in its group, so a group that still has members
after its leader exited (orphans: docs/swarm.md) is found with ``killpg(group, 0)`` and killed whole.
A child's standard output and error go to its log file, so the demo's terminal stays its own.
"""

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_ORPHAN_GRACE_S = 5.0  # after its leader exits, a group's DHT process and p2pd get this long to follow


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_status(self) -> int | None:
        """The exit status once it has ended (negative: killed by that signal), else None."""
        return self.process.poll()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Children:
    """Every process the demo started, in start order."""

    def __init__(self, stop_timeout_s: float, echo: Callable[[str], None] = lambda line: None):
        self.stop_timeout_s = stop_timeout_s
        self._echo = echo
        self.started: list[Child] = []

    def start(self, name: str, args: Sequence[str], log: Path, env: Mapping[str, str]) -> Child:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as sink:  # the child keeps its own descriptor; ours closes here
            process = subprocess.Popen(list(args), stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                       env=dict(env), process_group=0)
        child = Child(name, process, log)
        self.started.append(child)
        return child

    def running(self) -> list[Child]:
        return [child for child in self.started if child.exit_status() is None]

    def stop(self, children: Sequence[Child]) -> None:
        """SIGTERM to each of ``children`` still running, then wait up to ``stop_timeout_s`` for all of
        them; SIGKILL to the whole group of any still running, and of any that left members behind."""
        for child in children:
            if child.exit_status() is None:
                _signal_group(child.pid, signal.SIGTERM, leader_only=True)
        deadline = time.monotonic() + self.stop_timeout_s
        for child in children:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._echo(f"{child.name} (pid {child.pid}) did not stop within {self.stop_timeout_s:.0f} s: killed")
                _signal_group(child.pid, signal.SIGKILL)
                child.process.wait()
        for child in children:
            _reap_group(child, self._echo)

    def stop_all(self) -> None:
        """Stop every child, the most recently started first (nodes before the bootstrap they joined)."""
        self.stop(list(reversed(self.started)))


def _signal_group(group: int, signum: int, leader_only: bool = False) -> bool:
    """Send ``signum`` to the group's leader (``leader_only``) or to every member; False if none is left."""
    try:
        if leader_only:
            os.kill(group, signum)
        else:
            os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True


def group_alive(group: int) -> bool:
    """Whether a live (not zombie) process of the group is left. Linux: read from /proc, because an
    orphaned zombie stays in its group until something reaps it, which a container's init may never do;
    elsewhere: signal 0 to the group."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member we may not signal is still a member
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (command name)"
        except (OSError, IndexError):
            continue  # it ended while we looked
        state, process_group = fields[0], int(fields[2])
        if process_group == group and state not in ("Z", "X"):
            return True
    return False


def _reap_group(child: Child, echo: Callable[[str], None]) -> None:
    """Wait a little for the group's other members to follow their leader out, then kill what is left."""
    deadline = time.monotonic() + _ORPHAN_GRACE_S
    while group_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(child.pid):
        echo(f"{child.name}: processes left behind by pid {child.pid} (DHT, p2pd) were killed")
        _signal_group(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + _ORPHAN_GRACE_S  # SIGKILL is delivered, not awaited: on a loaded machine
        while group_alive(child.pid) and time.monotonic() < deadline:  # the process lingers a moment
            time.sleep(0.05)
