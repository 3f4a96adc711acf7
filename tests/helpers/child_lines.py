"""A helper process's stdout, line by line as it comes, for tests that wait on what it says.

    lines = read_lines(process)                        # a reader thread fills the queue
    line = wait_for_line(process, lines, "peer ", 60, log)
"""

import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest


def read_lines(process: subprocess.Popen) -> "queue.Queue[str]":
    """Every line ``process`` writes to its stdout, queued as it comes by a daemon thread."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    return lines


def wait_for_line(process: subprocess.Popen, lines: "queue.Queue[str]", prefix: str, timeout: float,
                  log: Path) -> str:
    """The next queued line that starts with ``prefix``, stripped (lines before it are dropped); fails the test,
    with the end of ``log`` (the process's stderr), if the process ends or ``timeout`` s pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {prefix!r} line from {Path(process.args[1]).name} within {timeout:.0f} s "
                            f"(exit status {process.poll()}):\n{log.read_text()[-3000:]}")
            continue
        if line.startswith(prefix):
            return line.strip()
