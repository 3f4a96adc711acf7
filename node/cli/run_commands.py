"""The commands around a node: ``version``, ``inspect``, ``eval``, ``demo`` and ``experiment``."""

from pathlib import Path
from typing import Annotated

import typer

from ftis.node.cli.base import STARTED, app, default, package_version, reported
from ftis.node.config.base import MAX_COUNT
from ftis.node.errors import UsageError, UserError
from ftis.protocol.limits import MAX_COMPLETION_TOKENS


@app.command("version")
def version_command() -> None:
    """Print the ftis-node version and the wire protocol version it speaks."""
    from ftis.protocol import PROTOCOL_VERSION

    typer.echo(f"ftis-node {package_version()} (protocol v{PROTOCOL_VERSION})")


@app.command("inspect")
def inspect_command(
    file: Annotated[Path, typer.Argument(help="A saved rollout batch (protocol bytes).", dir_okay=False)],
    max_memory_mb: Annotated[float, typer.Option(
        "--max-memory-mb", min=1.0, help="Refuse a batch whose columns would take more to inflate (a small file can "
                                         "declare gigabytes of text).")] = 1024.0,
) -> None:
    """Decode a saved batch and summarize it, or say exactly why it is invalid."""
    from ftis.protocol import DecodeError
    from ftis.protocol.summary import read_batch_file, summarize

    with reported():
        try:
            batch, size = read_batch_file(file, max_memory_mb)
        except OSError as error:
            raise UsageError(f"cannot read {file}: {error.strerror}") from None
        except DecodeError as error:  # the same error, naming the file
            raise UserError(f"{file} is not a valid batch: {error}") from None
    rows = summarize(batch, size)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{label:<{width}}  {value}")


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
        help=f"Default {default('GenerationConfig', 'max_new_tokens')}.")] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", min=1, max=MAX_COUNT, help=f"Default {default('GenerationConfig', 'batch_size')}.")] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", help="LoRA: lora (as is) or full (merged).")] = None,
    chat_template: Annotated[str | None, typer.Option("--chat-template", help="auto, on or off.")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help=f"cpu, cuda, ... (default {default('ModelConfig', 'device')}).")] = None,
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
    with reported():
        run_eval(request, lambda line: typer.echo(line), lambda line: typer.echo(line, err=True))


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
    with reported(stopped, after_failure=stopped):
        if display not in ("auto", "table", "lines"):
            raise UsageError(f"--display: expected auto, table or lines, got {display!r}")
        from ftis.node.demo.run import DemoRequest, run_demo
        from ftis.node.signals import exit_on_sigterm

        exit_on_sigterm()
        request = DemoRequest(config=config_file, out=out, rounds=rounds, solo=solo, view=display, started=STARTED,
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

    with reported(f"stopped: finished cells are kept in {out}; run the same command again to continue",
                   stopped_code=130):
        chosen = [name.strip() for name in conditions.split(",") if name.strip()] if conditions else None
        grid = load_grid(config_file).adjusted(quick=quick, seeds=seeds, rounds=rounds, conditions=chosen)
        from ftis.node.experiment.runner import run_experiment

        exit_on_sigterm()
        options = [("--config", config_file), ("--seeds", seeds), ("--rounds", rounds), ("--conditions", conditions)]
        command = shlex.join(["ftis-node", "experiment", "--out", str(out), *(["--quick"] if quick else []),
                              *(part for flag, value in options if value is not None for part in (flag, str(value)))])
        run_experiment(grid, out, lambda line: typer.echo(line), command)
