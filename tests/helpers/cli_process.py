"""``ftis-node`` run as a user runs it: the installed entry point in a subprocess, its output collected
line by line as it comes (a reader thread), so a test can wait for a line, signal it, and read it all."""

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

FTIS_NODE = str(Path(sys.executable).with_name("ftis-node"))  # the entry point installed beside this Python
START_TIMEOUT_S = 90.0  # torch's import dominates; a loaded machine takes several times the ~4 s it takes idle


class CliProcess:
    def __init__(self, *args: str):
        self.process = subprocess.Popen([FTIS_NODE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            self._new.put(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, matches: Callable[[str], bool], timeout: float = START_TIMEOUT_S) -> str:
        """The first new output line that ``matches``; fails the test if none comes in ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None and self._new.empty():
                    break
                continue
            if matches(line):
                return line
        self.process.kill()
        pytest.fail(f"{self.process.args[1]}: no such line within {timeout:.0f} s:\n{self.output}")

    def maddr(self) -> str:
        """The first full multiaddr it prints for others to join with (``--peer .../p2p/<peer id>``)."""
        return self.wait_for(lambda line: "--peer" in line and "/p2p/" in line).split()[-1]

    def wait(self, timeout: float) -> tuple[int, str]:
        """Its exit status once it ends by itself, and everything it printed."""
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"{self.process.args[1]} still running after {timeout:.0f} s:\n{self.output}")
        self._reader.join(10)  # it ends at the end of the output
        return status, self.output

    def terminate(self, timeout: float = 30.0) -> tuple[int, str]:
        """SIGTERM, then as ``wait``."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
