"""The demo's settings: one TOML file (the packaged ``config.toml`` unless ``--config`` names another).

    config = load_demo_config()           # the packaged file
    config.node_configs()                 # {"small": NodeConfig, ...}: [common] with each [nodes.<name>] over it

Layout of the file:
- ``[demo]``: the demo itself (rounds, the solo baseline, threads per process, time limits);
- ``[common]``: node settings every node shares, as in a node's own config file (``[common.task]``...);
- ``[nodes.<name>]``: one table per node, laid over ``[common]`` key by key (nested tables merge).

Every node's merged settings are validated as a ``NodeConfig`` when the file is loaded, so a bad
setting stops the demo before any process starts. The swarm's addresses and the run id are the
demo's to set (``swarm.initial_peers``, ``swarm.run_id``): a file that sets them is refused.
"""

import re
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from ftis.node.config import (
    MAX_COUNT,
    MAX_SECONDS,
    MAX_THREADS,
    RUN_ID_PATTERN,
    ConfigError,
    NodeConfig,
    Section,
    describe_validation_error,
    merged,
    read_toml,
)

PACKAGED_CONFIG = "config.toml"  # package data of ftis.node.demo
NODE_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,23}$"  # a folder name and a table column
_DEMO_OWNS = ("initial_peers", "run_id")  # [swarm] settings the demo sets for every node


class DemoSection(Section):
    """How the demo runs its processes."""

    rounds: int = Field(150, ge=1, le=MAX_COUNT, description="Rounds every node runs (one optimizer step each).")
    solo: bool = Field(
        True, description="Afterwards, run each node alone (on-policy, its own run) for as many rounds, from the "
        "same warm start and seed, and compare."
    )
    run_id: str = Field("ftis-local-demo", pattern=RUN_ID_PATTERN, description="The swarm's run id.")
    threads_per_node: int = Field(
        1, ge=1, le=MAX_THREADS,
        description="torch threads of each node process (OMP_NUM_THREADS) and of the warm-up: three nodes "
        "share a few cores."
    )
    start_timeout_s: float = Field(120.0, gt=0, le=MAX_SECONDS,
                                   description="The bootstrap peer must print its address by then.")
    stop_timeout_s: float = Field(
        30.0, gt=0, le=MAX_SECONDS, description="After SIGTERM, a process gets this long to shut down before SIGKILL."
    )


class DemoConfig(Section):
    """The whole file: ``[demo]``, ``[common]`` and one ``[nodes.<name>]`` table per node."""

    demo: DemoSection = Field(default_factory=DemoSection, description="The demo itself.")
    common: dict[str, Any] = Field(default_factory=dict, description="Node settings every node shares.")
    nodes: dict[str, dict[str, Any]] = Field(description="One table of node settings per node, over [common].")

    @model_validator(mode="after")
    def _nodes_are_valid(self) -> "DemoConfig":
        if not 1 <= len(self.nodes) <= 8:
            raise ValueError(f"nodes: between 1 and 8 nodes, got {len(self.nodes)}")
        for name in self.nodes:
            if not re.fullmatch(NODE_NAME_PATTERN, name):
                raise ValueError(f"nodes.{name}: a node name is lower-case letters, digits and '-' (at most 24)")
        for name, settings in self.node_settings().items():
            owned = [key for key in _DEMO_OWNS if key in settings.get("swarm", {})]
            if owned:
                raise ValueError(f"nodes.{name}: swarm.{', swarm.'.join(owned)} is set by the demo, not the file")
            try:
                NodeConfig.model_validate(settings)
            except ValidationError as error:
                raise ValueError(f"nodes.{name}: {describe_validation_error(error)}") from None
        return self

    def node_settings(self) -> dict[str, dict[str, Any]]:
        """Each node's settings as plain data: ``[common]`` with its own table merged over it."""
        return {name: merged(self.common, own) for name, own in self.nodes.items()}

    def node_configs(self) -> dict[str, NodeConfig]:
        return {name: NodeConfig.model_validate(settings) for name, settings in self.node_settings().items()}


def load_demo_config(path: str | Path | None = None) -> DemoConfig:
    """The demo's settings from ``path``, or the packaged file; ``ConfigError`` says what is wrong."""
    path = Path(path) if path is not None else Path(str(resources.files("ftis.node.demo") / PACKAGED_CONFIG))
    data = read_toml(path)
    try:
        return DemoConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path}: {describe_validation_error(error)}") from None
