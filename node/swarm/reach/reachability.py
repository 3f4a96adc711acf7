"""How peers reach this node, and the relay it may offer them: ``[swarm] reachability`` and ``relay_*`` as
options of hivemind's ``p2pd`` (docs/nat.md).

A node behind a NAT with nothing forwarded cannot be dialled; it reserves a slot on a relay (circuit relay
v2: one of ``relays``, by default its initial peers) and is reached at ``<relay's address>/p2p-circuit``.
Peers need nothing of it: libp2p finds that address when they dial the node's peer id (the relay knows it),
so the fetch path is the same for every member. Measured across network namespaces with a masquerading
router (tests/test_nat.py), hivemind 1.1.12:

- A relay serves only while its reachability is public: the bootstrap forces it (``forceReachabilityPublic``).
- Every p2pd relays for others by default, ``-relayService=0 -relay=0`` included (go-libp2p's default service):
  a relay is off only as a service that admits no reservation and no circuit.
- The relayed node reserves at once only with ``-autoRelay -relayDiscovery=0 -trustedRelays=<relays>``:
  with discovery on (hivemind's only choice), libp2p waits for 4 candidates or 3 minutes.
- A relay's circuit addresses are advertised only from its *public* addresses (not 10/8, 192.168/16...).
- An explicit ``connect`` to a ``/p2p/<id>/p2p-circuit`` address fails ("length greater than remaining
  number of bytes in buffer"): hivemind's multiaddr encodes ``/p2p/`` as a CID, which p2pd refuses.
  Peer routing (dial by peer id) is what works.

hivemind's ``P2P.create`` passes neither ``-relayDiscovery`` nor the relay service's limits, so the DHT
process adds them to the ``p2pd`` command line it builds (``RelayAwareDHT``; the DHT is a forked process,
and the patch lives in that process only).
"""

from dataclasses import dataclass
from typing import Any

import hivemind
from hivemind.p2p import P2P

from ftis.node.config import SwarmConfig
from ftis.node.swarm.reach.p2pd_metrics import RelayCounters, metrics_flag
from ftis.protocol.announcement import Reach, relay_of
from ftis.protocol.limits import MAX_MULTIADDR_CHARS, MAX_RELAY_ADDRS


@dataclass(frozen=True)
class ReachSettings:
    """What of ``[swarm]`` decides how peers reach this node and whether it relays for others."""

    reachability: str  # "auto", "public" or "relayed"
    client_mode: bool
    relays: tuple[str, ...]  # the relays a node behind a NAT reserves a slot on: ``relays``, else its initial peers
    relay_service: bool
    relay_max_reservations: int
    relay_max_circuits: int
    relay_data_limit_bytes: int
    relay_time_limit_s: float


def reach_settings(swarm: SwarmConfig) -> ReachSettings:
    return ReachSettings(swarm.reachability, swarm.client_mode, tuple(swarm.relays or swarm.initial_peers),
                         swarm.relay_service, swarm.relay_max_reservations, swarm.relay_max_circuits,
                         swarm.relay_data_limit_bytes, swarm.relay_time_limit_s)


def p2p_options(config: ReachSettings) -> dict[str, Any]:
    """Keyword arguments of ``hivemind.DHT`` (passed on to ``P2P.create``) for ``config``'s reachability."""
    options: dict[str, Any] = {"use_relay": True}  # dialling others through relays, whatever we are
    if config.reachability == "public":
        options["force_reachability"] = "public"
    elif config.reachability == "relayed":
        options["force_reachability"] = "private"
    if config.reachability != "public" and relays_of(config) and not config.client_mode:
        options["use_auto_relay"] = True  # under "auto", AutoNAT decides whether a slot is reserved
    return options


def p2pd_flags(config: ReachSettings, metrics_port: int | None = None) -> list[str]:
    """``p2pd`` options hivemind does not pass: static relays without discovery, the relay service's bounds, and
    the loopback port of libp2p's counters (``p2pd_metrics.py``)."""
    # -relayService=0 (and even -relay=0) leaves go-libp2p's own default relay service running (measured: a
    # bootstrap started so still gave reservations), so "off" is the service with room for nobody.
    reservations, circuits = (config.relay_max_reservations, config.relay_max_circuits) if config.relay_service \
        else (0, 0)
    flags = ["-relayService=1", f"-relayMaxReservations={reservations}", f"-relayMaxCircuits={circuits}",
             f"-relayDataLimit={config.relay_data_limit_bytes}", f"-relayTimeLimit={int(config.relay_time_limit_s)}s"]
    relays = relays_of(config)
    if relays and config.reachability != "public" and not config.client_mode:
        flags += ["-relayDiscovery=0", f"-trustedRelays={','.join(relays)}"]
    if metrics_port is not None:
        flags.append(metrics_flag(metrics_port))
    return flags


def own_reach(config: ReachSettings, visible_maddrs: list[str], counters: RelayCounters | None) -> Reach:
    """How peers reach this node now, for its announcement: through the relays whose circuit addresses it
    advertises; directly when it is set public or AutoNAT found it so; "private" when AutoNAT found that peers
    outside its network cannot dial it (and it holds no relay slot); not at all in client mode; else not known."""
    if config.client_mode:
        return Reach("unreachable")
    circuits = []
    for addr in visible_maddrs:
        try:
            relay_of(addr)
        except ValueError:
            continue
        if len(addr) <= MAX_MULTIADDR_CHARS and addr not in circuits:
            circuits.append(addr)
    if circuits:
        return Reach("relayed", tuple(circuits[:MAX_RELAY_ADDRS]))
    autonat = counters.autonat if counters is not None else "unknown"
    if config.reachability == "public" or autonat == "public":
        return Reach("direct")
    return Reach("private" if autonat == "private" else "unknown")


def describe(config: ReachSettings) -> list[str]:
    """The start-up lines saying how peers reach this node, and whether it relays for others."""
    relays = relays_of(config)
    if config.client_mode:
        lines = ["reachability: client mode: this node fetches its peers' batches and serves none of its own"]
    elif config.reachability == "public":
        lines = ["reachability: public: peers dial this node directly (a public address or a forwarded port)"]
    elif not relays:
        lines = [f"reachability: {config.reachability}, with no relay (no initial peers, no relays): unless peers can "
                 "dial this node directly, its batches cannot be fetched"]
    else:
        how = "directly if peers can dial it back (AutoNAT), else" if config.reachability == "auto" else "only"
        lines = [f"reachability: {config.reachability}: peers reach this node {how} through a slot it reserves on "
                 f"one of {len(relays)} relay{'s' if len(relays) > 1 else ''}"]
    if config.relay_service:
        lines.append(f"relay: offered to members behind a NAT (at most {config.relay_max_reservations} slots, "
                     f"{config.relay_max_circuits} relayed connections per peer)")
    return lines


def relays_of(config: ReachSettings) -> list[str]:
    """The relays a node behind a NAT reserves a slot on: ``relays``, else its initial peers."""
    return list(config.relays)


class RelayAwareDHT(hivemind.DHT):
    """A ``hivemind.DHT`` whose ``p2pd`` also gets ``flags`` (see the module's docstring)."""

    def __init__(self, *args: Any, p2pd_flags: list[str], **kwargs: Any):
        self._p2pd_flags = list(p2pd_flags)
        super().__init__(*args, **kwargs)

    def run(self) -> None:  # the DHT's own process
        build = P2P._make_process_args
        flags = self._p2pd_flags
        # Also the throwaway daemon of hivemind's identity check; it runs with the same relay flags.
        P2P._make_process_args = staticmethod(lambda *args, **kwargs: [*build(*args, **kwargs), *flags])
        super().run()
