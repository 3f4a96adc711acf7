"""A swarm peer process of ``relay_fetch.py`` and ``relay_limits.py``, run inside one of their network namespaces;
not a benchmark itself.

Run (from the repo root):  python -m benchmarks.relay_peer serve|fetch|stranger --peer MADDR --run-id RUN --host IP
                           [--reachability auto|public|relayed] [--sizes BYTES,...] [--client-mode]
                           [--bytes-protocol]

Both roles are a ``HivemindTransport`` whose poller reads the announcements once at start and then not for an hour
(nothing is fetched on its own), joined through ``--peer``. Each prints ``peer <peer id>`` once it is in and
``addrs <multiaddr> ...`` whenever its advertised addresses change (a node behind a NAT comes to advertise
``<relay>/p2p-circuit/p2p/<us>``).

serve  publishes one synthetic batch per size of ``--sizes`` (encoded bytes, rounds 0, 1, ... in that order; the
       first as soon as it is in), prints ``published <round> <bytes>`` for each and ``ready`` after the last,
       then serves them until SIGTERM or ``--life`` seconds. With ``--bytes-protocol`` it also answers
       ``BYTES_PROTOCOL``: a request (8 bytes: how many, 8 bytes: bytes per second, 0 for as fast as it goes) and
       that many zeros at that pace, or until the stream breaks: any traffic a relay would carry.
fetch  reads commands from stdin, one JSON object a line, and answers each with one line ``result <JSON>``:
       ``{"cmd": "first", "peer": ID, "timeout": S}`` fetches ``peer``'s first announced batch again and again
       until one fetch succeeds (``{"ok": true, "at": <time.time()>, "attempts": N, "via": [...]}``);
       ``{"cmd": "measure", "peers": {LABEL: ID, ...}, "reps": N, "rounds": [R, ...]}`` fetches each round of each
       peer once to warm up, then ``reps`` times, the peers taking turns fetch by fetch (answers ``{"fetches":
       [{"label", "round", "bytes", "seconds" or null, "error", "via"}, ...]}``); ``{"cmd": "quit"}`` ends it.
       A fetch is the transport's own (``_download``: stream, length prefix, body; then ``open_payload``: size,
       SHA-256, strict decode), timed from the request to the decoded batch; ``via`` is how this node's ``p2pd``
       is connected to that peer right after it: ``relayed`` (a ``/p2p-circuit`` connection) or ``direct``.
stranger  no member at all: bare ``p2pd``s (hivemind's ``P2P``, no DHT, no run) that dial a serving peer through
       its circuit address, as anyone who read it could; commands on stdin as ``fetch``'s:
       ``pull`` (one batch, stream by stream, each stream's bytes), ``hold`` (N strangers at once, each holding one
       ``BYTES_PROTOCOL`` stream), ``counters`` (``p2pd_metrics.read_counters`` of a ``p2pd`` on this namespace's
       loopback), ``quit``.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import threading
import time

from benchmarks.swarm_common import TOKENIZER, batch_of_size

_CIRCUIT = bytes([0xA2, 0x02])  # the multiaddr code of /p2p-circuit (290) as its varint


def config(args: argparse.Namespace):
    from ftis.node.config import SwarmConfig

    return SwarmConfig(run_id=args.run_id, initial_peers=[args.peer], host_maddrs=[f"/ip4/{args.host}/tcp/0"],
                       reachability=args.reachability, client_mode=args.client_mode, poll_interval_s=3600.0,
                       announce_interval_s=1.0, announcement_ttl_s=60.0, max_age_s=3600.0,
                       fetch_timeout_s=args.fetch_timeout, start_timeout_s=args.start_timeout)


_SAY = threading.Lock()


def say(line: str) -> None:
    with _SAY:
        print(line, flush=True)


def connections(transport, peer_id: str) -> list[str]:
    """How this node's ``p2pd`` is connected to ``peer_id`` now: "relayed" or "direct" for each connection."""
    from hivemind.p2p.p2p_daemon_bindings.utils import read_pbmsg_safe, write_pbmsg
    from hivemind.proto import p2pd_pb2 as p2pd_pb

    async def list_connections() -> list[tuple[bytes, list[bytes]]]:
        # The raw answer: hivemind's PeerInfo parses the addresses, and a /p2p/ component inside a circuit
        # address does not parse there.
        client = transport._p2p._client.control
        reader, writer = await client.daemon_connector.open_connection()
        await write_pbmsg(writer, p2pd_pb.Request(type=p2pd_pb.Request.LIST_PEERS))
        response = p2pd_pb.Response()
        await read_pbmsg_safe(reader, response)
        writer.close()
        return [(peer.id, list(peer.addrs)) for peer in response.peers]

    from hivemind.p2p import PeerID

    wanted = PeerID.from_base58(peer_id).to_bytes()
    found = asyncio.run_coroutine_threadsafe(list_connections(), transport._loop).result(10)
    return sorted("relayed" if any(_CIRCUIT in addr for addr in addrs) else "direct"
                  for peer, addrs in found if peer == wanted)


def announced(transport, run_id: str, shards: int, peer_id: str) -> dict:
    """``peer_id``'s batches (round -> descriptor) as its announcement lists them now."""
    from ftis.node.swarm.dht.directory import Directory, read_shards

    values = read_shards(transport._dht, run_id, shards).result(30)
    for announcement in Directory().read(values).announcements:
        if announcement.peer_id == peer_id:
            return {descriptor.round: descriptor for descriptor in announcement.batches}
    return {}


def fetch_once(transport, peer_id: str, descriptor, timeout: float) -> float:
    """Seconds from the request to the decoded batch (raises what the fetch raised)."""
    from ftis.node.swarm.exchange.payload import open_payload

    async def fetch() -> float:
        started = time.perf_counter()
        data, _ = await asyncio.wait_for(transport._fetcher.download(peer_id, descriptor), timeout)
        open_payload(descriptor, data)
        return time.perf_counter() - started

    return asyncio.run_coroutine_threadsafe(fetch(), transport._loop).result(timeout + 10)


def first(transport, args, command: dict) -> dict:
    peer, end, attempts = command["peer"], time.monotonic() + command["timeout"], 0
    last_error = "not announced yet"
    while time.monotonic() < end:
        batches = announced(transport, args.run_id, transport._config.shards, peer)
        if batches:
            attempts += 1
            try:
                fetch_once(transport, peer, batches[min(batches)], max(1.0, min(10.0, end - time.monotonic())))
                return {"ok": True, "at": time.time(), "attempts": attempts, "via": connections(transport, peer)}
            except Exception as error:  # refused, reset, no route to it yet: try again
                last_error = f"{type(error).__name__}: {error}"
        time.sleep(0.25)
    return {"ok": False, "attempts": attempts, "error": last_error}


def measure(transport, args, command: dict) -> dict:
    peers, rounds = command["peers"], command["rounds"]
    descriptors = {label: announced(transport, args.run_id, transport._config.shards, peer)
                   for label, peer in peers.items()}
    fetches = []
    for round_ in rounds:
        labels = [label for label in peers if round_ in descriptors[label]]
        for rep in range(-1, command["reps"]):  # -1: the warm-up, not counted
            for label in labels if rep % 2 == 0 else labels[::-1]:
                descriptor = descriptors[label][round_]
                record = {"label": label, "round": round_, "bytes": descriptor.bytes, "warmup": rep < 0}
                try:
                    record["seconds"] = fetch_once(transport, peers[label], descriptor, args.fetch_timeout)
                except Exception as error:
                    record["seconds"], record["error"] = None, f"{type(error).__name__}: {error}"
                record["via"] = connections(transport, peers[label])
                fetches.append(record)
    return {"fetches": fetches}


BYTES_PROTOCOL = "/ftis-bench/bytes/1"


async def serve_bytes(_info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``BYTES_PROTOCOL``: zeros, as many and as fast as asked, in pieces of at most 4 KiB (a quarter second's worth
    when paced), until the stream breaks."""
    try:
        request = await asyncio.wait_for(reader.readexactly(16), 10)
        total, rate = int.from_bytes(request[:8], "big"), int.from_bytes(request[8:], "big")
        piece = max(1, min(4096, rate // 4)) if rate else 4096
        sent = 0
        while sent < total:
            size = min(piece, total - sent)
            writer.write(bytes(size))
            await writer.drain()
            sent += size
            if rate:
                await asyncio.sleep(size / rate)
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        pass
    finally:
        writer.close()


def serve(transport, args) -> None:
    from hivemind.utils import get_dht_time

    threading.Thread(target=watch_addresses, args=(transport,), daemon=True).start()
    if args.bytes_protocol:
        asyncio.run_coroutine_threadsafe(transport._p2p.add_binary_stream_handler(BYTES_PROTOCOL, serve_bytes),
                                         transport._loop).result(30)
    end = time.monotonic() + args.life
    sizes = [int(size) for size in args.sizes.split(",") if size]
    for round_, size in enumerate(sizes):  # the smallest first: it goes out at once
        descriptor = transport.publish(batch_of_size(args.run_id, transport.peer_id, round_, get_dht_time(), size))
        say(f"published {round_} {descriptor.bytes}")
    say("ready")
    time.sleep(max(0.0, end - time.monotonic()))


def watch_addresses(transport) -> None:
    """Prints the node's advertised addresses whenever they change: what ``visible_maddrs`` reads (the DHT asks
    its ``p2pd``), with a timeout, in a thread of its own. Without a timeout, a call here once in a few runs never
    returned: hivemind's DHT process keeps no reference to the task that runs the call, the task was
    garbage-collected while it waited ("Task was destroyed but it is pending!", GeneratorExit) and the caller's
    future was never set."""
    from functools import partial

    import hivemind

    addrs: list[str] = []
    while True:
        try:
            future = transport._dht.run_coroutine(partial(hivemind.DHT._get_visible_maddrs, latest=True),
                                                  return_future=True)
        except Exception:  # the transport is closing
            return
        try:
            latest = [str(maddr) for maddr in future.result(5)]
        except Exception:  # that lost call: ask again
            latest = addrs
        if latest != addrs:
            addrs = latest
            say("addrs " + " ".join(addrs))
        time.sleep(0.2)


def fetch(transport, args) -> None:
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            return
        answer = first(transport, args, command) if command["cmd"] == "first" else measure(transport, args, command)
        say("result " + json.dumps(answer))


async def new_stranger(host: str):
    """A bare ``p2pd`` (hivemind's ``P2P``) listening on ``host``, with what dialling a circuit needs."""
    from hivemind.p2p import P2P

    return await P2P.create(host_maddrs=[f"/ip4/{host}/tcp/0"], use_relay=True, auto_nat=False, nat_port_map=False,
                            startup_timeout=60)


async def open_through(p2p, peer_id: str, circuit: str, protocol: str):
    """A stream to ``peer_id`` over ``circuit`` (dialled first: peer routing does not find a node behind a NAT)."""
    from hivemind.p2p import PeerID

    from ftis.node.swarm.reach.circuits import Encoded, maddr_bytes

    peer, dial_error = PeerID.from_base58(peer_id), None
    try:
        await asyncio.wait_for(p2p._client.connect(peer, [Encoded(maddr_bytes(circuit))]), 10)
    except Exception as error:  # refused by the relay, or a connection exists already: the stream decides
        dial_error = error
    try:
        return await asyncio.wait_for(p2p.call_binary_stream_handler(peer, protocol), 10)
    except Exception as error:
        raise (dial_error or error) from None  # the dial's error is the relay's answer


def reason(error: Exception) -> str:
    """An error in a line: for a dial that failed, the last dial's own error (the relay's answer)."""
    text = f"{type(error).__name__}: {error}"
    if "all dials failed" in text:
        text = f"{type(error).__name__}: dial failed: {text.rsplit(']', 1)[-1].strip(': ')}"
    return text.replace("\n", " ")[:300]


async def pull(p2p, run_id: str, command: dict) -> dict:
    """One batch through the fetch protocol, as a fetch takes it (a stream from the offset reached so far, after
    each one that ends early), each stream's payload bytes and time recorded; a stream that brings nothing (opened
    on a connection the relay has just reset) is retried after a pause, up to 5 in a row."""
    from hivemind.p2p import PeerID

    from ftis.node.swarm.dht.records import run_prefix

    streams, got, length, empty = [], 0, -1, 0
    end = time.monotonic() + command["timeout"]
    while got != length and empty < 5 and time.monotonic() < end:
        started, before, record = time.monotonic(), got, {"relayed": None, "error": ""}
        writer = None
        try:
            info, reader, writer = await open_through(p2p, command["peer"], command["circuit"],
                                                      f"{run_prefix(run_id)}.batch")
            record["relayed"] = "/p2p-circuit" in str(info.addr)
            writer.write(command["round"].to_bytes(8, "big") + got.to_bytes(8, "big"))
            await writer.drain()
            length = int.from_bytes(await asyncio.wait_for(reader.readexactly(8), 10), "big")
            while got < length and time.monotonic() < end:
                piece = await asyncio.wait_for(reader.read(1 << 20), max(0.1, end - time.monotonic()))
                if not piece:
                    break
                got += len(piece)
        except Exception as error:  # the relay reset the connection, or refused it
            record["error"] = reason(error)
        finally:
            if writer is not None:
                writer.close()
        streams.append({**record, "bytes": got - before, "seconds": time.monotonic() - started})
        empty = 0 if got > before else empty + 1
        if got == before:
            await asyncio.sleep(0.3 * empty)
    with contextlib.suppress(Exception):  # the last connection would count against the peer's circuits at once
        await p2p._client.disconnect(PeerID.from_base58(command["peer"]))
    return {"length": length, "got": got, "streams": streams}


async def hold_one(p2p, command: dict, t0: float) -> dict:
    """One stranger's ``BYTES_PROTOCOL`` stream, paced at ``rate``, read until it breaks or ``timeout``: when its
    first and last bytes came (seconds from ``t0``), how many, and how it ended."""
    record = {"first_s": None, "last_s": None, "bytes": 0, "relayed": None, "error": "", "open_at_end": False}
    end, writer = t0 + command["timeout"], None
    try:
        info, reader, writer = await open_through(p2p, command["peer"], command["circuit"], BYTES_PROTOCOL)
        record["relayed"] = "/p2p-circuit" in str(info.addr)
        writer.write((1 << 40).to_bytes(8, "big") + command["rate"].to_bytes(8, "big"))
        await writer.drain()
        while True:
            try:
                piece = await asyncio.wait_for(reader.read(1 << 16), max(0.01, end - time.monotonic()))
            except TimeoutError:
                record["open_at_end"] = True
                break
            if not piece:
                record["error"] = "the stream ended"
                break
            record["first_s"] = record["first_s"] or time.monotonic() - t0
            record["last_s"] = time.monotonic() - t0
            record["bytes"] += len(piece)
    except Exception as error:  # refused at the relay, or reset by it
        record["error"] = reason(error)
    finally:
        if writer is not None:
            writer.close()
    return record


async def hold(host: str, command: dict) -> dict:
    """``strangers`` fresh strangers at once, each holding one paced stream to the peer; ``most_at_once``: the most
    streams that were carrying bytes at the same time."""
    p2ps = await asyncio.gather(*(new_stranger(host) for _ in range(command["strangers"])))
    try:
        t0 = time.monotonic()
        records = await asyncio.gather(*(hold_one(p2p, command, t0) for p2p in p2ps))
    finally:
        await asyncio.gather(*(p2p.shutdown() for p2p in p2ps), return_exceptions=True)
    moments = sorted(r["first_s"] for r in records if r["first_s"] is not None)
    most = max((sum(1 for r in records if r["first_s"] is not None and r["first_s"] <= at <= r["last_s"])
                for at in moments), default=0)
    return {"streams": records, "most_at_once": most}


async def stranger(host: str, run_id: str) -> None:
    from ftis.node.swarm.reach.p2pd_metrics import read_counters

    loop = asyncio.get_running_loop()
    p2p = await new_stranger(host)
    say(f"peer {p2p.peer_id.to_base58()}")
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command = json.loads(line)
            if command["cmd"] == "quit":
                return
            if command["cmd"] == "pull":
                answer = await pull(p2p, run_id, command)
            elif command["cmd"] == "hold":
                answer = await hold(host, command)
            else:  # counters
                counters = await loop.run_in_executor(None, read_counters, command["port"])
                answer = {"counters": None if counters is None else dataclasses.asdict(counters)}
            say("result " + json.dumps(answer))
    finally:
        await p2p.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("serve", "fetch", "stranger"))
    parser.add_argument("--peer", required=True, help="full multiaddr of a member (the bootstrap)")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--host", required=True, help="the address to listen on")
    parser.add_argument("--reachability", default="auto", choices=("auto", "public", "relayed"))
    parser.add_argument("--client-mode", action="store_true", help="serve nothing, take no part in the DHT's storage")
    parser.add_argument("--sizes", default="", help="serve: encoded sizes of the batches to publish, in bytes")
    parser.add_argument("--fetch-timeout", type=float, default=60.0, help="seconds one fetch (or serve) may take")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds joining the DHT may take")
    parser.add_argument("--life", type=float, default=600.0, help="seconds before it stops by itself")
    parser.add_argument("--bytes-protocol", action="store_true", help=f"serve: also answer {BYTES_PROTOCOL}")
    args = parser.parse_args()
    if args.role == "stranger":
        asyncio.run(stranger(args.host, args.run_id))
        return

    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.dht.transport import HivemindTransport

    exit_on_sigterm()
    transport = HivemindTransport(config(args), TOKENIZER)
    try:
        say(f"peer {transport.peer_id}")
        (serve if args.role == "serve" else fetch)(transport, args)
    except (KeyboardInterrupt, Terminated, BrokenPipeError):
        pass
    finally:
        transport.close()


if __name__ == "__main__":
    main()
