"""The ``ftis-node`` command line. Thin: each command parses its options into a request and calls one function of
the package that does the work. Heavy imports (torch, hivemind, transformers) happen inside commands, never at
import, so that ``ftis-node --help`` returns at once.

Files:
- ``base.py``             the app, ``reported`` (the one place errors become messages and exit codes), option
                          types, the light client of ``status`` and ``dashboard``.
- ``run_commands.py``     ``version``, ``inspect``, ``eval``, ``demo``, ``experiment``.
- ``swarm_commands.py``   ``bootstrap``, ``status``, ``dashboard``, ``identity``, ``join``.
- ``models_commands.py``  ``models list``, ``models fetch``.
- ``__main__.py``         ``python -m ftis.node.cli``, where the entry point is not installed.
"""

from ftis.node.cli import models_commands, run_commands, swarm_commands  # noqa: F401 - each registers its commands
from ftis.node.cli.base import app

__all__ = ["app", "main"]


def main() -> None:
    app()
