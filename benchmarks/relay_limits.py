"""What a stranger can push through the bootstrap's relay, across a real NAT: bytes per relayed connection, relayed
connections at once, how long one stays open; against the bootstrap's ``relay_*`` settings.

Run (as root, from the repo root):  python -m benchmarks.relay_limits [--quick] [--logs DIR]
--quick: one start of the bootstrap per setting (small limits, the defaults, ``--no-relay``; about 3 minutes); the
full run starts each three times (``p2pd`` decides at its start which relay answers, docs/nat.md). Where network
namespaces cannot be built (not root, no ``ip`` or ``iptables``) it says why and exits with status 2.

Topology (``benchmarks/netns.py``; nothing leaves the machine), for each start:

    public 11.77.1.1 ─── 11.77.1.2 router (MASQUERADE) 10.77.2.1 ─── 10.77.2.2 home
    ftis-node bootstrap (the relay),                                 serving peer (reachability "relayed":
    strangers (bare p2pd's, no members)                              a slot on the bootstrap's relay at once)

- ``ftis-node bootstrap --config relay.toml`` with the ``[swarm]`` table of the setting (``SETTINGS``).
- The serving peer (``relay_peer.py serve --bytes-protocol``) publishes one batch and answers a protocol that sends
  zeros at a pace asked for: any traffic a relay would carry, not only fetches.
- The strangers (``relay_peer.py stranger``): hivemind's ``P2P`` alone, no DHT and no run, dialling the serving
  peer through the circuit address it advertises, as anyone who read an announcement could.

Measured, per start:
(a) bytes per relayed connection: the stranger pulls the batch through the fetch protocol stream by stream (each
    from where the last one ended, as ``hivemind_fetch.Fetcher.download`` does: a fetch hides the resets), each stream
    over a new relayed connection; the payload bytes each carried say which relay answered (the configured one
    resets at ``relay_data_limit_bytes``, p2pd's built-in one at 128 KiB);
(b) relayed connections at once to one peer: ``relay_max_circuits + 2`` strangers each open one stream paced at
    ``RATE`` bytes/s; the most carrying bytes at the same time;
(c) how long one relayed connection stays open: those paced streams, held until the relay resets them (their pace
    keeps them under both relays' data bounds until after the configured time limit);
(d) the bootstrap's own account: libp2p's counters of its bounded relay service (``p2pd_metrics.read_counters``:
    slots given, refusals, relayed connections, bytes carried) and what its lines said (``bootstrap.py``).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.relay_fetch import BenchError, Lines

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "bench-relay-limits"
KIB, MIB = 1024, 1024 * 1024
BUILTIN_DATA, BUILTIN_TIME_S, BUILTIN_CIRCUITS = 128 * KIB, 120.0, 16  # go-libp2p's relay.DefaultResources
RATE = 4 * KIB  # bytes/s of a paced stream: 10-20 s stay far below both data bounds (1 MiB, 128 KiB at 32 s)
BATCH = 4 * MIB  # the batch pulled through the relay (encoded size)
START_DEADLINE_S = 90.0  # bootstrap, serving peer, its slot, its circuit address
# name -> (the bootstrap's [swarm] table, extra options, whether (b) and (c) are measured)
SETTINGS = {
    "small": ({"relay_data_limit_bytes": MIB, "relay_time_limit_s": 10.0, "relay_max_circuits": 2}, (), True),
    "defaults": ({}, (), False),
    "no-relay": ({}, ("--no-relay",), False),
}


@dataclass
class Start:
    """What one start of the bootstrap let a stranger do."""

    setting: str
    table: dict
    relay_lines: list[str]
    slot: bool  # the serving peer got a slot and advertised a circuit address
    streams: list[dict] = field(default_factory=list)  # (a): one per stream that carried payload bytes
    pulled: int = 0
    length: int = 0
    held: dict | None = None  # (b), (c)
    counters: dict | None = None  # (d)
    said: list[str] = field(default_factory=list)  # the bootstrap's periodic and warning lines about its relay

    @property
    def per_connection(self) -> list[int]:
        return [s["bytes"] for s in self.streams if s["bytes"] > 0]

    @property
    def answered_by(self) -> str:
        """Which relay the bytes per connection point to: "configured", "built-in" or "?"."""
        if not self.slot:
            return "none"
        limit = self.table.get("relay_data_limit_bytes", 1 << 30)
        cut = self.per_connection[:-1]  # the last stream ends with the payload, not at a bound
        if self.counters and self.counters["slots_given"] > 0:
            return "configured"
        if cut and max(cut) <= BUILTIN_DATA < limit:
            return "built-in"
        if self.length and self.pulled == self.length and (not cut or max(cut) > BUILTIN_DATA):
            return "built-in" if self.counters and self.counters["slots_given"] == 0 else "configured"
        return "?"


def _write_config(directory: Path, table: dict) -> Path:
    path = directory / "relay.toml"
    path.write_text("[swarm]\n" + "".join(f"{key} = {value!r}\n" for key, value in table.items()))
    return path


def metrics_port(process: subprocess.Popen) -> int:
    """The loopback port the bootstrap's ``p2pd`` serves its counters on (its ``-metricsAddr``)."""
    import psutil

    for child in psutil.Process(process.pid).children(recursive=True):
        try:
            for arg in child.cmdline():
                if arg.startswith("-metricsAddr="):
                    return int(arg.rsplit(":", 1)[1])
        except psutil.NoSuchProcess:
            continue
    raise BenchError("the bootstrap's p2pd has no -metricsAddr")


def measure_start(setting: str, children: list[Lines], quick: bool) -> Start:
    """One start of the bootstrap under ``setting`` in fresh namespaces, (a)-(d) measured."""
    from benchmarks.netns import HOME_IP, PUBLIC_IP, Nat

    table, options, hold = SETTINGS[setting]
    with Nat() as nat, tempfile.TemporaryDirectory(prefix="ftis-relay-limits-") as scratch:
        deadline = time.monotonic() + START_DEADLINE_S

        def start(name: str, namespace: str, *args: str, stdin: bool = False) -> Lines:
            process = nat.popen(namespace, [sys.executable, *args], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                text=True)
            children.append(Lines(f"{setting} {name}", process))
            return children[-1]

        config = ("--config", str(_write_config(Path(scratch), table))) if table else ()
        bootstrap = start("bootstrap", nat.public, "-c", "from ftis.node.cli import main; main()", "bootstrap",
                          "--host-maddrs", f"/ip4/{PUBLIC_IP}/tcp/0", "--run-id", RUN_ID, "--log-interval", "2",
                          *config, *options)
        peer = bootstrap.wait_for("  ftis-node join --peer", deadline)[1].split("--peer ")[1].strip()
        relay_lines = [line for _, line in bootstrap.lines if line.startswith("relay:")]
        common = ("--peer", peer, "--run-id", RUN_ID)
        home = start("home peer", nat.home, "-m", "benchmarks.relay_peer", "serve", *common, "--host", HOME_IP,
                     "--reachability", "relayed", "--sizes", str(BATCH), "--bytes-protocol")
        stranger = start("stranger", nat.public, "-m", "benchmarks.relay_peer", "stranger", *common, "--host",
                         PUBLIC_IP, stdin=True)
        home_id = home.wait_for("peer ", deadline)[1].split()[1]
        stranger.wait_for("peer ", deadline)
        try:  # under --no-relay no slot may come: a shorter wait, then say so
            wait = deadline if setting != "no-relay" else min(deadline, time.monotonic() + 30)
            addrs = home.wait_for("addrs ", wait, "/p2p-circuit")[1].split()[1:]
        except BenchError:
            return Start(setting, table, relay_lines, False, counters=_counters(stranger, bootstrap),
                         said=_said(bootstrap))
        circuit = next(a for a in addrs if "/p2p-circuit" in a)
        length = int(home.wait_for("published 0 ", deadline + 60)[1].split()[2])
        home.wait_for("ready", deadline + 60)
        result = Start(setting, table, relay_lines, True, length=length)
        pulled = stranger.answer({"cmd": "pull", "peer": home_id, "circuit": circuit, "round": 0, "timeout": 60},
                                 time.monotonic() + 90, (home,))
        result.streams, result.pulled = pulled["streams"], pulled["got"]
        if hold:
            circuits, time_limit = table["relay_max_circuits"], table["relay_time_limit_s"]
            result.held = stranger.answer({"cmd": "hold", "peer": home_id, "circuit": circuit, "rate": RATE,
                                           "strangers": circuits + 2, "timeout": time_limit + 15},
                                          time.monotonic() + time_limit + 90, (home,))
        time.sleep(2.5)  # one more periodic line of the bootstrap's, after the member's announcement
        result.counters, result.said = _counters(stranger, bootstrap), _said(bootstrap)
        stranger.send({"cmd": "quit"})
        return result


def _counters(stranger: Lines, bootstrap: Lines) -> dict | None:
    answer = stranger.answer({"cmd": "counters", "port": metrics_port(bootstrap.process)}, time.monotonic() + 20)
    return answer["counters"]


def _said(bootstrap: Lines) -> list[str]:
    """The bootstrap's last periodic line and any warning about its relay."""
    lines = [line for _, line in list(bootstrap.lines)]
    periodic = [line for line in lines if "DHT peers in view" in line]
    return [line for line in lines if line.startswith("WARNING: p2pd's built-in relay")] + periodic[-1:]


def held_for(held: dict) -> list[float]:
    """Seconds each admitted paced stream stayed open (first to last byte), longest first."""
    return sorted((s["last_s"] - s["first_s"] for s in held["streams"] if s["first_s"] is not None), reverse=True)


def format_start(start: Start) -> list[str]:
    table = ", ".join(f"{key} = {value:,}" if isinstance(value, int) else f"{key} = {value:g}"
                      for key, value in start.table.items()) or "the defaults"
    lines = [f"{start.setting}: bootstrap with {table}" + (" and --no-relay" if start.setting == "no-relay" else "")]
    lines += [f"  it said: {line}" for line in start.relay_lines]
    if not start.slot:
        lines.append("  the serving peer got no slot on the relay (no circuit address within 30 s)")
    else:
        per = start.per_connection
        lines.append(f"  (a) a {start.length:,}-byte batch pulled by a stranger: {start.pulled:,} bytes over "
                     f"{len(per)} relayed connection{'s' if len(per) != 1 else ''} ({len(start.streams)} streams); "
                     f"payload bytes per connection: {', '.join(f'{n:,}' for n in per)}")
        errors = sorted({s["error"].split(":")[0] for s in start.streams if s["error"]})
        if errors:
            lines.append(f"      streams that ended early ended with: {', '.join(errors)}")
        lines.append(f"      answered by: {start.answered_by} relay")
    if start.held is not None:
        admitted = [s for s in start.held["streams"] if s["first_s"] is not None]
        refused = sorted({s["error"] for s in start.held["streams"] if s["first_s"] is None})
        lines.append(f"  (b) {len(start.held['streams'])} strangers at once: {len(admitted)} got a relayed stream, "
                     f"at most {start.held['most_at_once']} carrying bytes at the same time "
                     f"(relay_max_circuits = {start.table['relay_max_circuits']})"
                     + (f"; the others: {'; '.join(refused)}" if refused else ""))
        spans = held_for(start.held)
        still = sum(s["open_at_end"] for s in admitted)
        carried = ", ".join(f"{s['bytes']:,}" for s in admitted)
        lines.append(f"  (c) paced at {RATE // KIB} KiB/s, open for {', '.join(f'{s:.1f}' for s in spans)} s "
                     f"(relay_time_limit_s = {start.table['relay_time_limit_s']:g}), carrying "
                     f"{carried} bytes; {still} still open when the stranger "
                     "gave up")
    if start.counters is not None:
        c = start.counters
        lines.append(f"  (d) bootstrap's counters (bounded service only): {c['slots_given']} slots given, "
                     f"{c['refusals']} refused, {c['circuits']} relayed connections, {c['relayed_bytes']:,} bytes "
                     "carried")
    lines += [f"      it said: {line}" for line in start.said]
    return lines


def run(quick: bool, logs: Path | None) -> list[Start]:
    children: list[Lines] = []
    starts = []
    try:
        for _ in range(1 if quick else 3):
            for setting in SETTINGS:
                starts.append(measure_start(setting, children, quick))
                for line in format_start(starts[-1]):
                    print(line, flush=True)
    finally:
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for child in children:
                (logs / f"{child.name.replace(' ', '-')}.log").write_text(
                    "".join(f"{at:.3f} {line}\n" for at, line in child.lines), encoding="utf-8")
    return starts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one start per setting: about 3 minutes")
    parser.add_argument("--logs", type=Path, help="a folder to write each process's output to")
    args = parser.parse_args(argv)
    from benchmarks.netns import benchmark_start

    line = benchmark_start()
    if line is None:
        return 2
    started = time.monotonic()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {line}", flush=True)
    try:
        starts = run(args.quick, args.logs)
    except BenchError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    answered = [f"{s.setting}: {s.answered_by}" for s in starts]
    print(f"\nwhich relay answered, per start: {'; '.join(answered)}")
    load = os.getloadavg()
    print(f"{time.monotonic() - started:.0f} s in all; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at "
          "the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
