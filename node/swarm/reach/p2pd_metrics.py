"""What libp2p itself counts about reachability and relaying, read from hivemind's ``p2pd``.

``p2pd -metricsAddr=127.0.0.1:<port>`` serves libp2p's Prometheus counters at ``/metrics``: AutoNAT's verdict
(``libp2p_autonat_reachability_status``: 0 unknown, 1 public, 2 private), the relay slots this node asked for
(``libp2p_autorelay_*``) and what its own relay service carried for others (``libp2p_relaysvc_*``). The DHT
process starts ``p2pd``, so the node picks the port before and reads the page over loopback; nothing leaves the
machine (a namespace's loopback under the NAT tests). A counter libp2p has not created yet (no relay slot asked
for so far) reads 0. Measured names and values: docs/nat.md.
"""

import math
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass

_MAX_PAGE_BYTES = 1 << 20  # the page is ~65 KB (Go's runtime figures included)
AUTONAT = {0: "unknown", 1: "public", 2: "private"}


def free_port() -> int:
    """A loopback port free now, for ``p2pd``'s metrics page (another process could take it first: then the
    page is missing and ``RelayCounters`` reads None, nothing else changes)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def metrics_flag(port: int) -> str:
    return f"-metricsAddr=127.0.0.1:{port}"


def parse(page: str) -> dict[str, dict[str, float]]:
    """Prometheus text as ``{name: {labels: value}}`` (labels as written between the braces, "" for none)."""
    samples: dict[str, dict[str, float]] = {}
    for line in page.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isfinite(number):
            samples.setdefault(name, {})[labels.rstrip("}")] = number
    return samples


@dataclass(frozen=True)
class RelayCounters:
    """libp2p's counts since ``p2pd`` started."""

    autonat: str = "unknown"  # AutoNAT's verdict on this node: "unknown", "public" or "private"
    slots_reserved: int = 0  # relay slots this node obtained (new and renewed)
    slot_failures: int = 0  # its requests for a relay slot that failed (refused, relay gone...)
    slots_lost: int = 0  # slots it held that closed (a relay that went away or dropped it)
    # this node's relay service, for others:
    relayed_bytes: int = 0  # bytes it carried between peers
    slots_given: int = 0  # reservations it accepted
    refusals: int = 0  # reservations and relayed connections it refused (over its bounds)
    circuits: int = 0  # relayed connections it opened


def counters_of(samples: dict[str, dict[str, float]]) -> RelayCounters:
    def total(name: str, *, unless: str = "") -> int:
        """The sum of ``name`` over its labels, leaving out those that hold ``unless``."""
        return int(sum(value for labels, value in samples.get(name, {}).items() if not unless or unless not in labels))

    def only(name: str, holding: str) -> int:
        return int(sum(value for labels, value in samples.get(name, {}).items() if holding in labels))

    outcomes = "libp2p_autorelay_reservation_requests_outcome_total"
    return RelayCounters(
        autonat=AUTONAT.get(total("libp2p_autonat_reachability_status"), "unknown"),
        slots_reserved=only(outcomes, 'outcome="success"'),
        slot_failures=total(outcomes, unless='outcome="success"'),
        slots_lost=total("libp2p_autorelay_reservations_closed_total"),
        relayed_bytes=total("libp2p_relaysvc_data_transferred_bytes_total"),
        slots_given=only("libp2p_relaysvc_reservations_total", 'type="opened"'),
        refusals=total("libp2p_relaysvc_reservation_request_response_status_total", unless='status="ok"')
        + total("libp2p_relaysvc_connection_request_response_status_total", unless='status="ok"'),
        circuits=only("libp2p_relaysvc_connections_total", 'type="opened"'),
    )


def read_counters(port: int, timeout_s: float = 2.0) -> RelayCounters | None:
    """The counters on ``p2pd``'s page at ``port``; None when it cannot be read (not up yet, port taken)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
            page = response.read(_MAX_PAGE_BYTES).decode("utf-8", "replace")
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return counters_of(parse(page))
