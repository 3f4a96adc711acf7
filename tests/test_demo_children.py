"""Stopping what the demo started: SIGTERM first, SIGKILL for a process that ignores it, and the members a
process leaves behind in its group (as a node's DHT process and p2pd would be) are killed too."""

import os
import sys
import time

import psutil

from ftis.node.demo.children import Children, group_alive

# Prints the pid of a grandchild that ignores SIGTERM and outlives its parent (an orphan in the group).
LEAVES_AN_ORPHAN = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""
IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
                  "time.sleep(600)"


def wait_for_output(path, timeout=30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.strip():
            return text.strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} stayed empty")


def test_stop_all_kills_a_stubborn_child_and_the_orphans_of_another(tmp_path):
    notes = []
    children = Children(stop_timeout_s=1.0, echo=notes.append)
    parent = children.start("parent", [sys.executable, "-c", LEAVES_AN_ORPHAN], tmp_path / "parent.log", os.environ)
    stubborn = children.start("stubborn", [sys.executable, "-c", IGNORES_SIGTERM], tmp_path / "s.log", os.environ)
    orphan = psutil.Process(int(wait_for_output(tmp_path / "parent.log")))
    wait_for_output(tmp_path / "s.log")
    assert os.getpgid(orphan.pid) == parent.pid != os.getpgid(0)  # each child leads a group of its own
    started = time.monotonic()
    children.stop_all()
    assert time.monotonic() - started < 15
    assert parent.exit_status() == -15  # SIGTERM was enough for it
    assert stubborn.exit_status() == -9  # killed after stop_timeout_s
    assert not group_alive(parent.pid) and not group_alive(stubborn.pid)
    assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE
    assert any("stubborn" in note and "killed" in note for note in notes)
    assert any("parent" in note and "left behind" in note for note in notes)
    assert children.running() == []


def test_a_child_that_already_ended_is_reaped_quietly(tmp_path):
    notes = []
    children = Children(stop_timeout_s=5.0, echo=notes.append)
    done = children.start("done", [sys.executable, "-c", "print('bye')"], tmp_path / "done.log", os.environ)
    done.process.wait(30)
    children.stop_all()
    assert done.exit_status() == 0 and notes == []
    assert done.log_tail() == "bye"
