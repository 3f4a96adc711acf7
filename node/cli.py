"""The ``ftis-node`` command line. Thin: parse, build what the command needs, call one function.

Heavy imports (torch, hivemind, transformers) happen inside commands, never here, so that
``ftis-node --help`` returns at once.
"""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="ftis-node",
    help="Decentralized, collaborative GRPO across different models, with F-TIS.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _package_version() -> str:
    try:
        return version("ftis-node")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"


@app.command("version")
def version_command() -> None:
    """Print the ftis-node version and the wire protocol version it speaks."""
    from ftis.protocol import PROTOCOL_VERSION

    typer.echo(f"ftis-node {_package_version()} (protocol v{PROTOCOL_VERSION})")


@app.command("inspect")
def inspect_command(
    file: Annotated[Path, typer.Argument(help="A saved rollout batch (protocol bytes).", dir_okay=False)],
) -> None:
    """Decode a saved batch and summarize it, or say exactly why it is invalid."""
    from ftis.protocol import DecodeError, decode
    from ftis.protocol.limits import MAX_PAYLOAD_BYTES
    from ftis.protocol.summary import summarize

    try:
        size = file.stat().st_size
        if size > MAX_PAYLOAD_BYTES:  # refuse before reading it into memory
            raise DecodeError("payload", f"{size} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit")
        data = file.read_bytes()
    except OSError as error:
        typer.echo(f"error: cannot read {file}: {error.strerror}", err=True)
        raise typer.Exit(2) from None
    except DecodeError as error:
        typer.echo(f"error: {file} is not a valid batch: {error}", err=True)
        raise typer.Exit(1) from None
    try:
        batch = decode(data)
    except DecodeError as error:
        typer.echo(f"error: {file} is not a valid batch: {error}", err=True)
        raise typer.Exit(1) from None
    rows = summarize(batch, len(data))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{label:<{width}}  {value}")


def main() -> None:
    app()
