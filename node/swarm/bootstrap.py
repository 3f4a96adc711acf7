"""The bootstrap peer: a DHT-only member that others join through. No model code is imported;
hivemind itself imports torch, which dominates start-up (``run_bootstrap`` reports both times).

It installs the run's record validators like every node, so it stores and serves only valid,
signed announcements, and it logs how many peers it sees every ``log_interval_s``, and what its relay did (libp2p's
own counts, ``p2pd_metrics.py``). The CLI starts it as
publicly reachable and, unless ``--no-relay``, offering a relay to members behind a NAT (docs/nat.md).

Which relay answers is decided at ``p2pd``'s start: the service bounded by the ``relay_*`` settings, or the one
``p2pd`` starts beside it with go-libp2p's default bounds (``BUILTIN_RELAY``), which ``--no-relay`` does not stop
either. Only the bounded service counts in the metrics, so the bootstrap tells them apart after the fact: members
that announce a slot on it while the bounded service gave none since the start hold it on the built-in one
(``builtin_slots``); it says so plainly, once, and on each periodic line after.
"""

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ftis.node.config import ConfigError, SwarmConfig, read_toml, validated
from ftis.node.swarm.reach.p2pd_metrics import RelayCounters
from ftis.node.swarm.transport import Member

logger = logging.getLogger(__name__)

_READ_TIMEOUT_S = 30.0  # the periodic line's DHT reads: a busy DHT delays the line, a lost call skips it
# go-libp2p's default relay resources, which p2pd's built-in relay runs with (relay.DefaultResources); the data bound
# measured across the NAT namespaces (benchmarks/relay_limits.py: at most 98,304 payload bytes a connection)
BUILTIN_RELAY = "128 KiB each way and 2 min per relayed connection, 16 at once per peer"


def builtin_slots(peer_id: str, members: list[Member], counters: RelayCounters | None) -> int:
    """Members announcing a slot on this relay (``peer_id``) that its bounded service did not give: all of them when
    that service gave none since ``p2pd`` started, else 0 (so is it when the counters cannot be read)."""
    if counters is None or counters.slots_given > 0:
        return 0
    return sum(peer_id in member.relays for member in members)


def builtin_warning(held: int, relay_service: bool) -> str:
    """What the bootstrap says when ``held`` members hold slots on ``p2pd``'s built-in relay."""
    bounds = "the relay_* settings say" if relay_service else "--no-relay says"
    return (f"WARNING: p2pd's built-in relay is answering, not the configured one: {held} member"
            f"{'s announce' if held != 1 else ' announces'} a slot on this relay and its bounded service gave none. "
            f"Its bounds are {BUILTIN_RELAY}, whatever {bounds}; which relay answers is decided when p2pd starts "
            "(docs/nat.md)")


def bootstrap_config(config_file: Path | None, **given: object) -> SwarmConfig:
    """A bootstrap's ``[swarm]`` settings: reachability public and a relay offered, then the ``[swarm]`` table of
    ``config_file`` (the only table it may hold), then the options ``given`` (None: not given). ``ConfigError``
    for another table or a value that does not validate."""
    table = read_toml(config_file) if config_file is not None else {}
    unknown = sorted(set(table) - {"swarm"})
    if unknown or not isinstance(table.get("swarm", {}), dict):
        raise ConfigError(f"{config_file}: a bootstrap reads only a [swarm] table (found {unknown or 'swarm'})")
    options = {key: value for key, value in given.items() if value is not None}
    return validated(SwarmConfig, {"relay_service": True, **table.get("swarm", {}), "reachability": "public",
                                   **options})


def run_bootstrap(config: SwarmConfig, log_interval_s: float, echo: Callable[[str], None],
                  stop: Callable[[], bool] = lambda: False, started: float | None = None) -> None:
    """Run until ``stop()`` is true, Ctrl-C or SIGTERM (see ``ftis.node.signals``); always shuts down.
    ``started`` (``time.monotonic()``) is when the command began, for the start-up time it reports."""
    started = time.monotonic() if started is None else started
    import hivemind  # the torch import inside it is most of the start-up

    from ftis.node.swarm.dht.directory import READER_SHARDS, read_members
    from ftis.node.swarm.dht.transport import peer_id_of, start_dht
    from ftis.node.swarm.errors import SwarmError
    from ftis.node.swarm.reach.p2pd_metrics import free_port, read_counters

    imported = time.monotonic()
    scratch = None
    identity = config.identity_path
    if identity is None:
        scratch = Path(tempfile.mkdtemp(prefix="ftis-identity-"))
        identity = scratch / "identity.key"
    metrics_port = free_port()
    try:
        dht, _ = start_dht(config, Path(identity), announce=False, metrics_port=metrics_port)
    finally:  # p2pd has read a fresh key by now: nothing of it stays on disk, even if this process is killed
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    try:
        ready = time.monotonic()
        try:
            peer_id = peer_id_of(dht, _READ_TIMEOUT_S)
            addresses = dht.run_coroutine(partial(hivemind.DHT._get_visible_maddrs), return_future=True)
            maddrs = addresses.result(_READ_TIMEOUT_S)
        except Exception as error:
            raise SwarmError(f"the DHT process did not say its peer id and addresses within {_READ_TIMEOUT_S:.0f} s: "
                             f"{type(error).__name__}: {error}") from None
        echo(f"bootstrap peer {peer_id} for run {config.run_id!r} is up "
             f"(start-up {ready - started:.1f} s; hivemind and torch were imported after {imported - started:.1f} s)")
        for line in relay_lines(config):
            echo(line)
        echo("nodes join with:")
        for maddr in maddrs:
            echo(f"  ftis-node join --peer {maddr}")
        next_log, warned = time.monotonic() + log_interval_s, False
        while not stop():
            time.sleep(min(0.2, log_interval_s))
            if time.monotonic() >= next_log:
                next_log += log_interval_s
                try:  # hivemind's calls may be dropped by its process: never wait on one without a limit
                    neighbours = dht.run_coroutine(_count_neighbours, return_future=True).result(_READ_TIMEOUT_S)
                    reading = read_members(dht, config.run_id, config.shards, timeout=_READ_TIMEOUT_S,
                                           beam_size=config.read_beam_size or None, sample=READER_SHARDS)
                except Exception as error:  # the DHT is busy or a call was lost: the next line tries again
                    echo(f"{time.strftime('%H:%M:%S')} the DHT did not answer within {_READ_TIMEOUT_S:.0f} s "
                         f"({type(error).__name__}); trying again in {log_interval_s:g} s")
                    continue
                count = len(reading.members) if reading.complete else f"~{reading.estimated_total:,}"
                line = (f"{time.strftime('%H:%M:%S')} DHT peers in view: {neighbours}; "
                        f"members announcing in run {config.run_id!r}: {count}")
                relay = read_counters(metrics_port)
                if relay is not None and config.relay_service:
                    line += (f"; relay: {relay.slots_given} slots given, {relay.refusals} refused, {relay.circuits} "
                             f"relayed connections, {relay.relayed_bytes / 2**20:.1f} MiB carried")
                held = builtin_slots(peer_id, reading.members, relay)
                if held:
                    line += f"; p2pd's built-in relay holds {held} slot{'s' if held != 1 else ''}"
                    if not warned:
                        echo(builtin_warning(held, config.relay_service))
                        warned = True
                echo(line)
    finally:
        dht.shutdown()


def relay_lines(config: SwarmConfig) -> list[str]:
    """The start-up lines about the relay: the configured bounds, and the built-in relay's that may apply instead."""
    builtin = f"p2pd's built-in relay may answer in its place ({BUILTIN_RELAY}); the periodic line says when it does"
    if not config.relay_service:
        return ["relay: off (members behind a NAT need another relay: [swarm] relays)",
                f"relay: {builtin.replace('in its place', 'all the same')}"]
    return [f"relay: on, for members behind a NAT (at most {config.relay_max_reservations} slots, "
            f"{config.relay_max_circuits} relayed connections at once per peer, "
            f"{_kib(config.relay_data_limit_bytes)} each way and {config.relay_time_limit_s:g} s per connection; "
            "--no-relay turns it off)", f"relay: {builtin}"]


async def _count_neighbours(_dht: object, node: object) -> int:
    return len(node.protocol.routing_table.uid_to_peer_id)


def _kib(size: int) -> str:
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 2**10:g} KiB"
