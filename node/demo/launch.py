"""What the demo runs, exactly as a user would: ``ftis-node bootstrap``, ``join`` and ``dashboard`` command lines,
each node's config file, the environment of the processes, and the bootstrap's address from its log.

    maddr = wait_for_maddr(bootstrap_child, timeout_s=120)
    url = wait_for_url(dashboard_child, timeout_s=120)  # dashboard_args(run_id, maddr, folders)
    path = write_node_config(folder, settings, run_id="ftis-local-demo", peer=maddr)
    args = join_args(path, maddr, folder, rounds=60)
"""

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ftis.node.demo.children import Child
from ftis.node.demo.settings import merged
from ftis.node.demo.toml_file import write_toml
from ftis.node.errors import UserError

LOOPBACK = "/ip4/127.0.0.1/tcp/0"  # any free port on loopback: the demo never listens on a network
NODE_CONFIG = "node.toml"  # in each node's folder, beside what the node writes there
NODE_LOG = "node.log"
_JOIN_HINT = "ftis-node join --peer "  # how the bootstrap prints its addresses
_DASHBOARD_HINT = "dashboard: http"  # how the dashboard prints its address


class DemoError(UserError, RuntimeError):
    """The demo cannot go on: a process died or never came up, or the output folder is taken."""


def ftis_node_command() -> list[str]:
    """The ``ftis-node`` entry point installed beside this Python, else the module run by this Python."""
    script = Path(sys.executable).with_name("ftis-node")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ftis.node.cli"]


def child_env(threads: int) -> dict[str, str]:
    """This environment, with each process's torch threads capped (three nodes share a few cores) and
    unbuffered output (a log shows what happened up to the moment a process died)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    return env


def bootstrap_args(run_id: str) -> list[str]:
    return [*ftis_node_command(), "bootstrap", "--host-maddrs", LOOPBACK, "--run-id", run_id,
            "--log-interval", "3600"]


def join_args(config: Path, maddr: str, folder: Path, rounds: int) -> list[str]:
    return [*ftis_node_command(), "join", "--config", str(config), "--peer", maddr, "--out", str(folder),
            "--rounds", str(rounds), "--display", "lines"]


def write_node_config(folder: Path, settings: Mapping[str, Any], run_id: str, peer: str,
                      over: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """The node's config file in ``folder``: its settings, joined to ``peer`` in ``run_id`` on loopback
    (unless its settings name other addresses); ``over``'s sections laid over its own (the solo baseline's loop)."""
    swarm = {"host_maddrs": [LOOPBACK], **settings.get("swarm", {}), "run_id": run_id, "initial_peers": [peer]}
    data = merged(merged(dict(settings), dict(over or {})), {"swarm": swarm})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / NODE_CONFIG
    write_toml(path, data)
    return path


def dashboard_args(run_id: str, maddr: str, folders: Sequence[Path]) -> list[str]:
    """``ftis-node dashboard`` on the demo's swarm and node folders, on a free loopback port."""
    nodes = [part for folder in folders for part in ("--node", str(folder))]
    return [*ftis_node_command(), "dashboard", "--peer", maddr, "--run-id", run_id, "--port", "0",
            "--refresh", "2", *nodes]


def wait_for_maddr(bootstrap: Child, timeout_s: float) -> str:
    """The first full multiaddr the bootstrap prints; ``DemoError`` if it exits or stays silent."""
    return _wait_for_word(bootstrap, "the bootstrap peer", "an address", timeout_s,
                          lambda line: _JOIN_HINT in line and "/p2p/" in line)


def wait_for_url(dashboard: Child, timeout_s: float) -> str:
    """The address the dashboard prints once it serves; ``DemoError`` if it exits or stays silent."""
    return _wait_for_word(dashboard, "the dashboard", "its address", timeout_s,
                          lambda line: line.startswith(_DASHBOARD_HINT))


def _wait_for_word(child: Child, who: str, what: str, timeout_s: float, found: Callable[[str], bool]) -> str:
    """The last word of the first line of ``child``'s log that ``found`` accepts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in _lines(child.log):
            if found(line):
                return line.split()[-1]
        if child.exit_status() is not None:
            raise DemoError(f"{who} exited with status {child.exit_status()} before it was up; "
                            f"the end of {child.log}:\n{child.log_tail()}")
        time.sleep(0.2)
    raise DemoError(f"{who} printed no {what} within {timeout_s:.0f} s; the end of {child.log}:\n{child.log_tail()}")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
