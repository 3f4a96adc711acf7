"""The swarm's commands: ``bootstrap``, ``status``, ``dashboard``, ``identity`` and ``join``."""

from pathlib import Path
from typing import Annotated

import typer

from ftis.node.cli.base import STARTED, RunId, Shards, app, default, light_client_config, reported
from ftis.node.config.base import MAX_COUNT, MAX_SECONDS
from ftis.node.dashboard import defaults as dashboard_defaults


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
    from ftis.node.signals import exit_on_sigterm
    from ftis.node.swarm.bootstrap import bootstrap_config, run_bootstrap

    with reported("stopped: the DHT and p2pd are shut down"):
        config = bootstrap_config(config_file, host_maddrs=host_maddrs, announce_maddrs=announce_maddrs,
                                  identity_path=identity, run_id=run_id, shards=shards,
                                  relay_service=False if no_relay else None)
        exit_on_sigterm()
        run_bootstrap(config, log_interval, lambda line: typer.echo(line), started=STARTED)


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
    with reported():
        from ftis.node.swarm.status import swarm_status

        config = light_client_config(peer, run_id, shards)
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

    with reported("stopped: the server and the DHT client are shut down"):
        swarm = light_client_config(peer, run_id, shards) if peer else None
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

    with reported():
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
        "--lora-rank", help=f"LoRA rank r (default {default('ModelConfig', 'lora_rank')}).")] = None,
    lora_alpha: Annotated[float | None, typer.Option(
        "--lora-alpha", help=f"LoRA alpha (default {default('ModelConfig', 'lora_alpha'):g}).")] = None,
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
    with reported("stopped: the DHT and p2pd are shut down"):
        from ftis.node.runner.join import JoinRequest, join
        from ftis.node.signals import exit_on_sigterm

        request = JoinRequest(out=out, peer=peer, config=config_file, model=model, adapter=adapter,
                              lora_rank=lora_rank, lora_alpha=lora_alpha, task=task, run_id=run_id, identity=identity,
                              host_maddrs=host_maddrs, announce_maddrs=announce_maddrs, backend=backend,
                              display=display, rounds=rounds, resume=resume)
        exit_on_sigterm()
        join(request, lambda line: typer.echo(line))
