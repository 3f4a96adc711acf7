"""Errors a user or a peer can cause, and the exit codes the command line gives them.

``UserError`` is the base of every error that a user's input or a peer's data can cause: a config file
with a bad key, a path that holds no model, a checkpoint of another model or a corrupt one, a folder
that holds another run, a peer address that is not one, a peer's batch that does not decode, and the
user's environment that cannot do what was asked (vLLM not installed, a port in use). Its message says
what is wrong in the user's terms, without a traceback. A programming error is never one: it keeps
its own class (``TypeError``, ``AssertionError``, an internal error of the project) and its traceback.

Each class keeps its other bases (``class ConfigError(UserError, ValueError)``), so ``except
ValueError`` still catches it; a subclass of one (``NotAModelError``) needs nothing more. A new error
class chooses: ``UserError`` among its bases, or the short list of internal errors in
``tests/test_errors.py``.

The command line (``node/cli/base.py``, ``reported``, around every command) prints ``error: <message>``
on standard error and exits with the error's ``exit_code``: ``USAGE`` for a command given something
it cannot use (an option, a config or grid file), ``FAILURE`` (the default) for one that failed on
what it was given. A one-off message with no class of its own is raised as ``UserError`` (or ``UsageError``)
itself.

``UserError`` is defined in ``ftis.protocol.errors`` and imported here: the protocol is the lowest
layer, imports nothing of the node, and its ``DecodeError`` is one. ``node/config``, which imports
nothing of the node outside itself, takes it from there too; the rest of the node from here.
"""

from ftis.protocol.errors import UserError

USAGE, FAILURE = 2, 1  # exit codes: the command was given something it cannot use / failed on what it was given

__all__ = ["FAILURE", "USAGE", "UsageError", "UserError"]


class UsageError(UserError):
    """The command was given an option or a file it cannot use."""

    exit_code = USAGE
