"""The ``ftis-node`` command line. Thin: parse, build what the command needs, call one function.

Heavy imports (torch, hivemind, transformers) happen inside commands, never here, so that
``ftis-node --help`` returns at once.
"""

import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ftis.node.config import SwarmConfig

_STARTED = time.monotonic()  # start-up times are reported from here

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


def _swarm_config(**settings: object) -> "SwarmConfig":
    """A SwarmConfig from the options given (None = default); a bad value exits with its reason."""
    from ftis.node.config import SwarmConfig

    return _validated(SwarmConfig, {key: value for key, value in settings.items() if value is not None})


RunId = Annotated[str | None, typer.Option("--run-id", help="The run to serve or read (default: ftis-demo).")]
Shards = Annotated[int | None, typer.Option("--shards", help="DHT keys the run's announcements use (default 8).")]


@app.command("bootstrap")
def bootstrap_command(
    host_maddrs: Annotated[list[str] | None, typer.Option("--host-maddrs", help="Listen here (repeatable).")] = None,
    announce_maddrs: Annotated[
        list[str] | None, typer.Option("--announce-maddrs", help="Advertise these public addresses (repeatable).")
    ] = None,
    identity: Annotated[
        Path | None, typer.Option("--identity", help="Key file: keeps the peer id across restarts (created if new).")
    ] = None,
    run_id: RunId = None,
    shards: Shards = None,
    log_interval: Annotated[float, typer.Option("--log-interval", help="Seconds between peer counts.")] = 30.0,
) -> None:
    """Run a DHT-only entry peer and print the addresses nodes join with. Ctrl-C or SIGTERM stops it."""
    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.bootstrap import run_bootstrap
    from ftis.node.swarm.transport import SwarmError

    config = _swarm_config(host_maddrs=host_maddrs, announce_maddrs=announce_maddrs, identity_path=identity,
                           run_id=run_id, shards=shards)
    exit_on_sigterm()
    try:
        run_bootstrap(config, log_interval, lambda line: typer.echo(line), started=_STARTED)
    except SwarmError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    except (KeyboardInterrupt, Terminated):
        typer.echo("stopped: the DHT and p2pd are shut down")


@app.command("status")
def status_command(
    peer: Annotated[list[str], typer.Option("--peer", help="Full multiaddr of any member (repeatable).")],
    run_id: RunId = None,
    shards: Shards = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Join as a light client, print the swarm's members, exit."""
    import json
    import shutil
    import tempfile

    from ftis.node.swarm.directory import read_members
    from ftis.node.swarm.hivemind_transport import start_dht
    from ftis.node.swarm.transport import SwarmError

    config = _swarm_config(initial_peers=peer, run_id=run_id, shards=shards, client_mode=True,
                           host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    scratch = Path(tempfile.mkdtemp(prefix="ftis-status-"))
    try:
        dht, _ = start_dht(config, scratch / "identity.key", announce=False)
        try:
            members = read_members(dht, config.run_id, config.shards)
        finally:
            dht.shutdown()
    except SwarmError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if as_json:
        typer.echo(json.dumps([member.__dict__ for member in members], indent=2))
        return
    from ftis.node.swarm.status import members_table

    typer.echo(members_table(members, config.run_id))


@app.command("join")
def join_command(
    peer: Annotated[list[str] | None, typer.Option("--peer", help="Full multiaddr of any member (repeatable).")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="A TOML config (see examples/).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Tiny name, folder or hub id.")] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", help="full or lora.")] = None,
    task: Annotated[str | None, typer.Option("--task", help="gsm8k, math500 or arithmetic.")] = None,
    run_id: RunId = None,
    identity: Annotated[Path | None, typer.Option("--identity", help="Key file: a stable peer id.")] = None,
    host_maddrs: Annotated[list[str] | None, typer.Option("--host-maddrs", help="Listen here.")] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help="Stop after this many rounds.")] = None,
    out: Annotated[
        Path, typer.Option("--out", help="The node's folder: metrics, TensorBoard events, checkpoints, export.")
    ] = Path("runs/node"),
) -> None:
    """Join a swarm and train: generate, publish, collect peers' groups, take F-TIS steps. Ctrl-C stops."""
    from ftis.node.config import ConfigError, NodeConfig, load_config
    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.transport import SwarmError

    try:
        base = load_config(config_file) if config_file is not None else NodeConfig()
    except ConfigError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    overrides = {
        "model": {"name": model, "adapter": adapter},
        "task": {"name": task},
        "swarm": {"initial_peers": peer, "run_id": run_id, "identity_path": identity, "host_maddrs": host_maddrs},
    }
    data = base.model_dump()
    for section, values in overrides.items():
        data[section].update({key: value for key, value in values.items() if value is not None})
    config = _validated(NodeConfig, data)
    exit_on_sigterm()
    from ftis.node.runner.join import build_node, run_node

    try:
        node = build_node(config)
        run_node(node, rounds, out, lambda line: typer.echo(line))
    except SwarmError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    except (KeyboardInterrupt, Terminated):
        typer.echo("stopped: the DHT and p2pd are shut down")


def _validated(model_class: type, data: dict) -> Any:
    """``model_class`` validated from ``data``; each problem printed as ``error: field: reason``, exit 2."""
    from pydantic import ValidationError

    try:
        return model_class.model_validate(data)
    except ValidationError as error:
        for problem in error.errors():
            typer.echo(f"error: {'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    app()
