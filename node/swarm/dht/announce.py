"""Announcing this node's batches, for ``HivemindTransport``: one signed record in the DHT, kept fresh.

The node stores one small signed announcement (``protocol/announcement.py``: what its outbox lists) under its
run's shard key, in the subkey only its key may write, and stores it again every ``announce_interval_s`` and at
once after a publish (``announce_soon``), each time expiring ``announcement_ttl_s`` later. A store no DHT peer
accepted, or that failed, is counted (``failures``) and the next one goes out as usual.

How peers reach this node (``reachability.own_reach``: directly, through a relay's circuit, not at all) is found
again before each announcement, from the addresses ``p2pd`` advertises and AutoNAT's verdict among libp2p's own
counters (``p2pd_metrics.py``), and said in the announcement; a change is logged, and a node that peers outside
its network cannot fetch from says so plainly.

Runs on the transport's network loop; ``visible_maddrs`` is the one call from another thread.
"""

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import hivemind
from hivemind.p2p import P2P
from hivemind.utils import get_dht_time

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.calls import DHTCalls
from ftis.node.swarm.exchange.outbox import Outbox
from ftis.node.swarm.reach.p2pd_metrics import RelayCounters, read_counters
from ftis.node.swarm.reach.reachability import ReachSettings, own_reach, reach_settings, relays_of
from ftis.protocol.announcement import Reach, encode_announcement

logger = logging.getLogger(__name__)

_IDENTIFY_TIMEOUT_S = 5.0  # asking p2pd for this node's addresses, before an announcement


@dataclass(frozen=True)
class AnnounceSettings:
    """What of ``[swarm]`` an announcer reads: how often it stores its record, how long a record lives, and how
    peers reach this node."""

    interval_s: float
    ttl_s: float
    reach: ReachSettings


def announce_settings(swarm: SwarmConfig) -> AnnounceSettings:
    return AnnounceSettings(swarm.announce_interval_s, swarm.announcement_ttl_s, reach_settings(swarm))


class Announcer:
    def __init__(self, config: AnnounceSettings, dht: hivemind.DHT, p2p: P2P, key: str, owner: bytes,
                 outbox: Outbox, calls: DHTCalls, metrics_port: int, loop: asyncio.AbstractEventLoop):
        """``key``, ``owner``: the shard key this node's record goes under and the subkey it signs with;
        ``metrics_port``: where its ``p2pd`` serves libp2p's counters; ``loop``: the network loop it runs on."""
        self._config, self._dht, self._p2p, self._key, self._owner = config, dht, p2p, key, owner
        self._outbox, self._calls, self._metrics_port, self._loop = outbox, calls, metrics_port, loop
        self._now = asyncio.Event()
        self._reach = Reach()
        self._visible: list[str] = []  # this node's addresses, as last read from p2pd
        self.failures = 0  # announcements no DHT peer stored, or that failed
        self.relay: RelayCounters | None = None  # libp2p's counters, as last read

    def announce_soon(self) -> None:
        """Announce now rather than at the next period (after a publish); on the loop."""
        self._now.set()

    async def run(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands as the event
            # is set (a publish just before close), so this loop would outlive close() by its 10 s wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.interval_s):
                    await self._now.wait()
            self._now.clear()
            await self._find_reach()
            announcement = self._outbox.announcement()
            if announcement is None:
                continue
            try:
                stored = await self._calls.result(self._dht.store(
                    self._key,
                    subkey=self._owner,
                    value=encode_announcement(announcement),
                    expiration_time=get_dht_time() + self._config.ttl_s,
                    return_future=True,
                ))
                if not stored:
                    self.failures += 1
                    logger.warning("announcement not stored (no DHT peer accepted it); retrying")
            except asyncio.CancelledError:
                raise
            except Exception as error:  # keep announcing: the next round may succeed
                self.failures += 1
                logger.warning("announcement failed: %s: %s", type(error).__name__, error)

    def visible_maddrs(self) -> list[str]:
        """This node's addresses, asked of p2pd from another thread through the loop's connection, within a time
        limit; when p2pd does not answer in time, the addresses last read. (Not through ``hivemind.DHT``, whose
        calls from another thread have no time limit: a call its process drops would hang the caller for good.)"""
        future = asyncio.run_coroutine_threadsafe(self._read_visible(), self._loop)
        try:
            return future.result(_IDENTIFY_TIMEOUT_S + 1.0)
        except Exception as error:
            future.cancel()
            logger.debug("cannot read this node's addresses: %s: %s", type(error).__name__, error)
            return list(self._visible)

    async def _read_visible(self) -> list[str]:
        """This node's addresses as p2pd sees them now (``_IDENTIFY_TIMEOUT_S`` at most); kept as the last known."""
        maddrs = await asyncio.wait_for(self._p2p.get_visible_maddrs(latest=True), _IDENTIFY_TIMEOUT_S)
        self._visible = [str(maddr) for maddr in maddrs]
        return list(self._visible)

    async def _find_reach(self) -> None:
        """How peers reach this node now (``own_reach``), for the announcement; a change is logged."""
        counters = await asyncio.to_thread(read_counters, self._metrics_port)
        try:
            visible = await self._read_visible()
        except Exception as error:  # p2pd busy, slow or restarting: what was known stays (the announcement goes on)
            logger.debug("cannot read this node's addresses: %s: %s", type(error).__name__, error)
            return
        reach = own_reach(self._config.reach, visible, counters)
        self.relay = counters if counters is not None else self.relay
        if reach != self._reach:
            _say_reach(reach, self._reach, self._config.reach)
        self._reach = reach
        self._outbox.set_reach(reach)


def _say_reach(reach: Reach, before: Reach, config: ReachSettings) -> None:
    """Log how peers reach this node, now that it changed; plainly when peers outside its network cannot."""
    if reach.how == "relayed":
        logger.info("peers reach this node through %s: %s", "a relay" if len(reach.relays) == 1 else
                    f"{len(reach.relays)} relays", ", ".join(reach.addrs))
    elif reach.how == "direct":
        logger.info("peers reach this node directly")
    elif reach.how == "private":
        lost = " (it lost its relay slot)" if before.how == "relayed" else ""
        relays = relays_of(config)
        logger.warning(
            "PEERS OUTSIDE THIS NODE'S NETWORK CANNOT FETCH ITS BATCHES: AutoNAT finds it unreachable from outside "
            "and no relay holds a slot for it%s; %s. It still trains on its peers' batches. Forward a port or name "
            "a relay (docs/nat.md).", lost,
            f"libp2p keeps asking its {len(relays)} relay{'s' if len(relays) != 1 else ''}" if relays
            else "it knows no relay ([swarm] relays, or an initial peer)")
