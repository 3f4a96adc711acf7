"""SIGTERM and Ctrl-C stop long-running commands the same way, also in a process started with SIGINT
ignored (what a non-interactive shell does to a command started in the background with ``&``)."""

import signal
import subprocess
import sys

import pytest

PROGRAM = """
import os, signal
from ftis.node.signals import Terminated, exit_on_sigterm
exit_on_sigterm()
try:
    os.kill(os.getpid(), signal.{name})
    signal.pause()
except KeyboardInterrupt:
    print("KeyboardInterrupt")
except Terminated as stop:
    print("Terminated", stop.code)
"""


@pytest.mark.parametrize(("name", "expected"), [("SIGINT", "KeyboardInterrupt"), ("SIGTERM", "Terminated 143")])
def test_a_signal_raises_in_a_process_started_with_sigint_ignored(name, expected):
    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    result = subprocess.run([sys.executable, "-c", PROGRAM.format(name=name)], capture_output=True, text=True,
                            timeout=20, preexec_fn=ignore_sigint)
    assert result.stdout.strip() == expected, result.stderr
