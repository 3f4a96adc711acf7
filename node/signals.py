"""Process-level shutdown: SIGTERM ends a long-running command the way Ctrl-C does, so its
``finally`` blocks shut the DHT and ``p2pd`` down instead of leaving them orphaned (docs/swarm.md)."""

import signal
import sys
from types import FrameType


class Terminated(SystemExit):
    """Raised in the main thread when the process receives SIGTERM."""


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``Terminated`` (exit status 143) in the main thread, and SIGINT raise
    ``KeyboardInterrupt`` even when the process was started with SIGINT ignored (a non-interactive
    shell does that to a command it starts in the background with ``&``, and Python then installs no
    handler): whoever signals a long-running command gets the same clean stop."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM kills at once
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
