"""Process-level shutdown: SIGTERM ends a long-running command the way Ctrl-C does, so its
``finally`` blocks shut the DHT and ``p2pd`` down instead of leaving them orphaned (DESIGN §4)."""

import signal
import sys
from types import FrameType


class Terminated(SystemExit):
    """Raised in the main thread when the process receives SIGTERM."""


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``Terminated`` (exit status 143) in the main thread."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM kills at once
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
