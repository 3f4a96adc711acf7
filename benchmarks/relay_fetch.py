"""Payload fetches through a circuit relay beside direct ones, across a real NAT: latency and throughput.

Run (as root, from the repo root):  python -m benchmarks.relay_fetch [--quick] [--member-fetcher] [--logs DIR]
--quick: payloads of 64 KiB, 1 MiB and 8 MiB, 3 timed fetches of each per path (under 90 s); the full run adds
24 MiB and times 10 fetches of each. Where network namespaces cannot be built (not root, no ``ip`` or
``iptables``) it says why and exits with status 2.

Topology (``benchmarks/netns.py``; nothing leaves the machine):

    public 11.77.1.1 ─── 11.77.1.2 router (MASQUERADE) 10.77.2.1 ─── 10.77.2.2 home
    bootstrap + relay,                                               serving peer "relayed"
    serving peer "direct", the fetcher

- ``ftis-node bootstrap`` in "public", which offers a relay by default (docs/nat.md).
- Two serving peers (``benchmarks/relay_peer.py serve``), each publishing one synthetic batch (random token ids and
  log-probs: they barely compress) of each size: one in "public" (``reachability = "public"``: fetched directly),
  one in "home" behind the NAT with the default ``reachability = "auto"``: AutoNAT finds it unreachable and it
  reserves a slot on the bootstrap's relay, so it is fetched through the relay.
- The fetcher (``relay_peer.py fetch``) in "public", in client mode: the home node then never opens a connection to
  it on its own (a DHT request of the home node's would do so, through the NAT, and libp2p would carry the fetch
  over that direct connection instead of the relay). After each fetch it lists its ``p2pd``'s connections to the
  peer: the table's "via" column says which path the fetches took. ``--member-fetcher`` makes it a full DHT member,
  as a node of the swarm is: then the home node's own connection carries its batches ("via direct"), the relay none.
  ``--logs DIR`` keeps each process's output.

Each fetch is the transport's own (``hivemind_fetch.Fetcher.download``: open a stream to the peer by its id, send the
round, read the length prefix and the payload; then ``open_payload``: size, SHA-256, strict decode), timed from the
request to the decoded batch. Per size: one warm-up fetch per path, then the timed ones, the two paths taking turns.
Latency = median and 90th percentile; throughput = payload bytes / median (MB = 10^6 bytes). Besides, the time from
starting the home node's process to the first fetch of its batch that succeeded (start-up, joining the DHT,
AutoNAT's verdict, the reservation, its announcement, the fetch), and the steps on the way.
"""

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "bench-relay"
KIB, MIB = 1024, 1024 * 1024
QUICK_SIZES = (64 * KIB, 1 * MIB, 8 * MIB)
FULL_SIZES = (*QUICK_SIZES, 24 * MIB)  # 32 MiB of random tokens is over a batch's 8 Mi-token limit
START_DEADLINE_S = {True: 70.0, False: 150.0}  # bootstrap, peers, AutoNAT, the reservation (quick / full)
FETCH_TIMEOUT_S = 60.0
PATHS = ("direct", "relayed")


class BenchError(RuntimeError):
    pass


@dataclass
class Lines:
    """A child process's output, line by line as it comes, each line with the time (``time.time()``) it came."""

    name: str
    process: subprocess.Popen
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._new: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            entry = (time.time(), line.rstrip("\n"))
            self.lines.append(entry)
            self._new.put(entry)

    def wait_for(self, prefix: str, deadline: float, contains: str = "") -> tuple[float, str]:
        """The first line (seen so far or coming before ``deadline``, monotonic) starting with ``prefix`` and
        holding ``contains``, with its time."""
        for entry in list(self.lines):
            if entry[1].startswith(prefix) and contains in entry[1]:
                return entry
        while time.monotonic() < deadline:
            try:
                entry = self._new.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if entry[1].startswith(prefix) and contains in entry[1]:
                return entry
        tail = "\n".join(line for _, line in self.lines[-30:])
        state = "ended" if self.process.poll() is not None else "still running"
        raise BenchError(f"{self.name}: no line starting {prefix!r} holding {contains!r} in time ({state}); "
                         f"its last lines:\n{tail}")

    def send(self, command: dict) -> None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self, command: dict, deadline: float, others: tuple["Lines", ...] = ()) -> dict:
        """Sends ``command`` and waits (until ``deadline``, monotonic) for its ``result`` line; gives up at once
        when one of ``others`` (the peers it fetches from) has ended."""
        seen = sum(1 for _, line in self.lines if line.startswith("result "))
        self.send(command)
        while time.monotonic() < deadline and self.process.poll() is None:
            for other in others:
                if other.process.poll() is not None:
                    tail = "\n".join(line for _, line in other.lines[-30:])
                    raise BenchError(f"{other.name} ended (status {other.process.returncode}); its last lines:\n{tail}")
            results = [line for _, line in self.lines if line.startswith("result ")]
            if len(results) > seen:
                return json.loads(results[seen].removeprefix("result "))
            time.sleep(0.1)
        tail = "\n".join(line for _, line in self.lines[-30:])
        raise BenchError(f"{self.name}: no answer to {command['cmd']!r} in time; its last lines:\n{tail}")


@dataclass
class Cpu:
    """CPU seconds the ``p2pd`` of the relay and of each serving peer used while the timed fetches ran."""

    relay_s: float
    server_s: dict[str, float]  # path -> its serving peer's p2pd
    mb: dict[str, float]  # path -> MB fetched (warm-ups included) that went that way
    seconds: float  # wall time of the timed part


@dataclass
class Startup:
    joined_s: float  # home process started -> "peer" (in the DHT)
    circuit_s: float | None  # -> advertises a /p2p-circuit address (None: its line did not come)
    first_fetch_s: float  # -> the fetcher's first fetch of its batch succeeded
    attempts: int
    via: list[str]


def p2pd_cpu_s(process: subprocess.Popen) -> float:
    """CPU seconds (user + system) used so far by the ``p2pd`` under ``process`` (``ip netns exec`` execs the
    command, so the Popen's pid is the Python process; its DHT child started the daemon)."""
    import psutil

    total = 0.0
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return total
    for child in children:
        try:
            if child.name() == "p2pd":
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def human(size: int) -> str:
    if size >= MIB:
        return f"{size / MIB:g} MiB"
    return f"{size / KIB:g} KiB"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(fetches: list[dict], sizes: list[int]) -> list[dict]:
    """One row per (size, path) of the timed fetches (warm-ups left out): counts, latencies, throughput."""
    rows = []
    for round_, size in enumerate(sizes):
        medians = {}
        for path in PATHS:
            mine = [f for f in fetches if f["round"] == round_ and f["label"] == path and not f.get("warmup")]
            times = [f["seconds"] for f in mine if f["seconds"] is not None]
            payload = mine[0]["bytes"] if mine else 0
            median = percentile(times, 50)
            medians[path] = median
            rows.append({"size": size, "path": path, "bytes": payload, "fetches": len(mine),
                         "failed": len(mine) - len(times), "median_s": median, "p90_s": percentile(times, 90),
                         "mb_s": payload / median / 1e6 if times else float("nan"),
                         "via": sorted({kind for f in mine for kind in f["via"]}),
                         "errors": sorted({f["error"] for f in mine if f.get("error")})})
        rows[-1]["relayed_over_direct"] = medians["relayed"] / medians["direct"]
    return rows


DEFAULT_RELAY_DATA = 1 << 17  # bytes per relayed connection and direction of go-libp2p's default relay resources


def cut_at_default_relay_limit(rows: list[dict]) -> bool:
    """Relayed fetches failed, every one of them by a stream that ended before ``DEFAULT_RELAY_DATA`` bytes: the
    signature of a relay that applies go-libp2p's default limits (a fresh relayed connection carries one 64 KiB
    fetch, the next one on it breaks off) instead of the bootstrap's ``relay_*`` settings."""
    errors = [error for row in rows if row["path"] == "relayed" for error in row["errors"]]
    cut = [re.match(r"IncompleteReadError: (\d+) bytes read", error) for error in errors]
    return bool(errors) and all(match and int(match.group(1)) < DEFAULT_RELAY_DATA for match in cut)


def format_report(rows: list[dict], startup: Startup | None, cpu: Cpu | None = None) -> list[str]:
    """The printed table and the start-up line."""
    table = [("payload", "path", "via", "fetches", "failed", "median", "p90", "throughput", "relayed/direct")]
    for row in rows:
        ratio = row.get("relayed_over_direct")
        table.append((human(row["size"]), row["path"], "+".join(row["via"]) or "-", str(row["fetches"]),
                      str(row["failed"]), f"{row['median_s'] * 1e3:.1f} ms", f"{row['p90_s'] * 1e3:.1f} ms",
                      f"{row['mb_s']:.1f} MB/s", "" if ratio is None else f"{ratio:.2f}× the time"))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = []
    for n, line in enumerate(table):
        cells = [c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        lines.append(" | ".join(cells).rstrip())
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths))
    for row in rows:
        for error in row["errors"]:
            lines.append(f"{human(row['size'])} {row['path']}: failed: {error}")
    if cut_at_default_relay_limit(rows):
        lines.append("the relayed fetches broke off within 128 KiB of a relayed connection: the relay applied "
                     "go-libp2p's default limits (128 KiB and 2 min per relayed connection), not the bootstrap's "
                     "relay_* settings (p2pd starts a default relay beside the configured one; docs/nat.md)")
    lines.append("latency from the request to the decoded batch (stream, length, payload, SHA-256, decode); "
                 "throughput = payload / median; MB = 10^6 bytes; via = the fetcher's p2pd connections to the "
                 "peer after each fetch")
    if startup is not None:
        circuit = "(not seen)" if startup.circuit_s is None else f"after {startup.circuit_s:.1f} s"
        lines.append(f"home node, from starting its process: in the DHT after {startup.joined_s:.1f} s, advertises "
                     f"its relayed address {circuit}, first fetch of its batch succeeded "
                     f"after {startup.first_fetch_s:.1f} s ({startup.attempts} attempt"
                     f"{'s' if startup.attempts != 1 else ''}, via {'+'.join(startup.via) or '-'})")
    if cpu is not None and cpu.mb.get("relayed") and cpu.mb.get("direct"):
        lines.append(f"p2pd CPU per MB fetched: the relay {cpu.relay_s / cpu.mb['relayed'] * 1e3:.1f} ms; the serving "
                     f"peer {cpu.server_s['direct'] / cpu.mb['direct'] * 1e3:.1f} ms direct, "
                     f"{cpu.server_s['relayed'] / cpu.mb['relayed'] * 1e3:.1f} ms relayed ({cpu.mb['direct']:.0f} + "
                     f"{cpu.mb['relayed']:.0f} MB in {cpu.seconds:.1f} s, warm-ups included)")
    return lines


def run(quick: bool, logs: Path | None = None, member: bool = False) -> tuple[list[dict], Startup, Cpu]:
    from benchmarks.netns import Nat

    sizes = list(QUICK_SIZES if quick else FULL_SIZES)
    reps = 3 if quick else 10
    children: list[Lines] = []
    try:
        with Nat() as nat:
            return _measure(nat, children, sizes, reps, quick, member)
    finally:
        if logs is not None:  # each child's output, for when something went wrong
            logs.mkdir(parents=True, exist_ok=True)
            for child in children:
                (logs / f"{child.name.replace(' ', '-')}.log").write_text(
                    "".join(f"{at:.3f} {line}\n" for at, line in child.lines), encoding="utf-8")


def _measure(nat, children: list, sizes: list[int], reps: int, quick: bool,
             member: bool) -> tuple[list[dict], Startup, Cpu]:
    from benchmarks.netns import HOME_IP, PUBLIC_IP

    deadline = time.monotonic() + START_DEADLINE_S[quick]

    def start(name: str, namespace: str, *args: str, stdin: bool = False) -> Lines:
        process = nat.popen(namespace, [sys.executable, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            text=True)
        children.append(Lines(name, process))
        return children[-1]

    bootstrap = start("bootstrap", nat.public, "-c", "from ftis.node.cli import main; main()", "bootstrap",
                      "--host-maddrs", f"/ip4/{PUBLIC_IP}/tcp/0", "--run-id", RUN_ID, "--log-interval", "3600")
    _, relay = bootstrap.wait_for("relay:", deadline)
    if "relay: on" not in relay:
        raise BenchError(f"the bootstrap offers no relay: {relay}")
    peer = bootstrap.wait_for("  ftis-node join --peer", deadline)[1].split("--peer ")[1].strip()
    common = ("--peer", peer, "--run-id", RUN_ID, "--fetch-timeout", str(FETCH_TIMEOUT_S))
    served = ",".join(str(size) for size in sizes)
    peer_module = ("-m", "benchmarks.relay_peer")
    public = start("public peer", nat.public, *peer_module, "serve", *common, "--host", PUBLIC_IP,
                   "--reachability", "public", "--sizes", served)
    fetcher = start("fetcher", nat.public, *peer_module, "fetch", *common, "--host", PUBLIC_IP,
                    "--reachability", "public", *(() if member else ("--client-mode",)), stdin=True)
    home_started = time.time()
    home = start("home peer", nat.home, *peer_module, "serve", *common, "--host", HOME_IP, "--sizes", served)

    joined_at, joined = home.wait_for("peer ", deadline)
    home_id = joined.split()[1]
    first = fetcher.answer({"cmd": "first", "peer": home_id, "timeout": max(1.0, deadline - time.monotonic())},
                           deadline + 15, (home,))
    if not first["ok"]:
        raise BenchError(f"no fetch from the home node succeeded in time: {first['error']}")
    try:  # only a line of the home node's: the fetch through the relay is what counts
        circuit_s = home.wait_for("addrs ", time.monotonic() + 10, "/p2p-circuit")[0] - home_started
    except BenchError:
        circuit_s = None
    startup = Startup(joined_at - home_started, circuit_s, first["at"] - home_started, first["attempts"],
                      first["via"])
    public_id = public.wait_for("peer ", deadline)[1].split()[1]
    for server in (public, home):
        server.wait_for("ready", deadline + 60)  # the largest batches take a while to build on a small machine
    servers = {"direct": public, "relayed": home}
    before = {name: p2pd_cpu_s(child.process) for name, child in (("relay", bootstrap), *servers.items())}
    measure_started = time.monotonic()
    measured = fetcher.answer({"cmd": "measure", "peers": {"direct": public_id, "relayed": home_id},
                               "reps": reps, "rounds": list(range(len(sizes)))},
                              time.monotonic() + len(sizes) * (reps + 1) * 2 * FETCH_TIMEOUT_S, (public, home))
    used = {name: p2pd_cpu_s(child.process) - before[name] for name, child in (("relay", bootstrap), *servers.items())}
    cpu = Cpu(used["relay"], {path: used[path] for path in servers},
              {path: sum(f["bytes"] for f in measured["fetches"] if f["seconds"] and f["via"] == [path]
                         and f["label"] == path) / 1e6 for path in servers}, time.monotonic() - measure_started)
    fetcher.send({"cmd": "quit"})
    return summarize(measured["fetches"], sizes), startup, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 sizes up to 8 MiB, 3 fetches each: under 90 s")
    parser.add_argument("--member-fetcher", action="store_true", help="the fetcher a full DHT member, not a client: "
                        "the home node's own connection to it then carries its batches (via direct)")
    parser.add_argument("--logs", type=Path, help="a folder to write each process's output to")
    args = parser.parse_args(argv)
    from benchmarks.netns import benchmark_start

    line = benchmark_start()
    if line is None:
        return 2
    started = time.monotonic()
    print(line, flush=True)
    try:
        rows, startup, cpu = run(args.quick, args.logs, args.member_fetcher)
    except BenchError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    print("\nfetches from a peer in \"public\" (direct) and from one behind the NAT (relayed through the bootstrap)")
    if args.member_fetcher:
        print("--member-fetcher: the fetcher is a DHT member, so the home node has a connection of its own to it; "
              "\"via\" says which way its batches went")
    for line in format_report(rows, startup, cpu):
        print(line)
    load = os.getloadavg()
    print(f"\n{time.monotonic() - started:.0f} s in all; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at "
          "the end")
    failed = sum(row["failed"] for row in rows)
    wrong_path = [row for row in rows if row["via"] != [row["path"]] and not args.member_fetcher]
    return 1 if failed or wrong_path else 0


if __name__ == "__main__":
    sys.exit(main())
