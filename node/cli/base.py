"""What every command of the ``ftis-node`` command line shares: the app, the one place errors become messages and
exit codes (``reported``), option types, and the light client ``status`` and ``dashboard`` join as."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Annotated

import typer

from ftis.node.errors import USAGE, UserError
from ftis.node.signals import Terminated

if TYPE_CHECKING:
    from ftis.node.config import SwarmConfig

STARTED = time.monotonic()  # start-up times are reported from here

app = typer.Typer(
    name="ftis-node",
    help="Decentralized, collaborative GRPO across different models, with F-TIS.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@contextmanager
def reported(stopped: str | None = None, *, stopped_code: int = 0, after_failure: str | None = None) -> Iterator[None]:
    """The one place where a command's errors become messages and exit codes; every command that can fail runs
    inside it.

    A ``UserError`` (``ftis.node.errors``) prints ``error: <its message>`` on standard error and exits with its
    ``exit_code``; ``after_failure`` follows it there unless the code is ``USAGE``, an error refused before anything
    started (the demo says that what it started has ended). In a command that runs until stopped (``stopped``
    given), Ctrl-C or SIGTERM prints ``stopped`` and exits with ``stopped_code``. Anything else is a bug and keeps
    its traceback."""
    interrupts = (KeyboardInterrupt, Terminated) if stopped is not None else ()
    try:
        yield
    except UserError as error:
        typer.echo(f"error: {error}", err=True)
        if after_failure is not None and error.exit_code != USAGE:
            typer.echo(after_failure, err=True)
        raise typer.Exit(error.exit_code) from None
    except interrupts:
        typer.echo(stopped)
        raise typer.Exit(stopped_code) from None


def package_version() -> str:
    try:
        return version("ftis-node")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"


def light_client_config(peer: list[str], run_id: str | None, shards: int | None) -> "SwarmConfig":
    """A client that reads the DHT and announces nothing, listening on loopback only (status, dashboard);
    ``ConfigError`` for a bad option."""
    from ftis.node.config import SwarmConfig, validated

    given = {"initial_peers": peer, "run_id": run_id, "shards": shards}
    return validated(SwarmConfig, {key: value for key, value in given.items() if value is not None}
                     | {"client_mode": True, "host_maddrs": ["/ip4/127.0.0.1/tcp/0"]})


def default(section: str, field: str) -> object:
    """A config field's default, for a help string (the config is the one place defaults live)."""
    from ftis.node import config

    return getattr(config, section).model_fields[field].default


RunId = Annotated[str | None, typer.Option(
    "--run-id", help=f"The run to serve or read (default: {default('SwarmConfig', 'run_id')}).")]
Shards = Annotated[int | None, typer.Option(
    "--shards", help=f"DHT keys the run's announcements use (default {default('SwarmConfig', 'shards')}).")]
