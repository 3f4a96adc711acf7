"""A swarm peer process of ``relay_fetch.py``, run inside one of its network namespaces; not a benchmark itself.

Run (from the repo root):  python -m benchmarks.relay_peer serve|fetch --peer MADDR --run-id RUN --host IP
                           [--reachability auto|public|relayed] [--sizes BYTES,...] [--client-mode]

Both roles are a ``HivemindTransport`` whose poller reads the announcements once at start and then not for an hour
(nothing is fetched on its own), joined through ``--peer``. Each prints ``peer <peer id>`` once it is in and
``addrs <multiaddr> ...`` whenever its advertised addresses change (a node behind a NAT comes to advertise
``<relay>/p2p-circuit/p2p/<us>``).

serve  publishes one synthetic batch per size of ``--sizes`` (encoded bytes, rounds 0, 1, ... in that order; the
       first as soon as it is in), prints ``published <round> <bytes>`` for each and ``ready`` after the last,
       then serves them until SIGTERM or ``--life`` seconds.
fetch  reads commands from stdin, one JSON object a line, and answers each with one line ``result <JSON>``:
       ``{"cmd": "first", "peer": ID, "timeout": S}`` fetches ``peer``'s first announced batch again and again
       until one fetch succeeds (``{"ok": true, "at": <time.time()>, "attempts": N, "via": [...]}``);
       ``{"cmd": "measure", "peers": {LABEL: ID, ...}, "reps": N, "rounds": [R, ...]}`` fetches each round of each
       peer once to warm up, then ``reps`` times, the peers taking turns fetch by fetch (answers ``{"fetches":
       [{"label", "round", "bytes", "seconds" or null, "error", "via"}, ...]}``); ``{"cmd": "quit"}`` ends it.
       A fetch is the transport's own (``_download``: stream, length prefix, body; then ``open_payload``: size,
       SHA-256, strict decode), timed from the request to the decoded batch; ``via`` is how this node's ``p2pd``
       is connected to that peer right after it: ``relayed`` (a ``/p2p-circuit`` connection) or ``direct``.
"""

import argparse
import asyncio
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
    from ftis.node.swarm.directory import Directory, read_shards

    values = read_shards(transport._dht, run_id, shards).result(30)
    for announcement in Directory().read(values).announcements:
        if announcement.peer_id == peer_id:
            return {descriptor.round: descriptor for descriptor in announcement.batches}
    return {}


def fetch_once(transport, peer_id: str, descriptor, timeout: float) -> float:
    """Seconds from the request to the decoded batch (raises what the fetch raised)."""
    from ftis.node.swarm.inbox import open_payload

    async def fetch() -> float:
        started = time.perf_counter()
        data, _ = await asyncio.wait_for(transport._download(peer_id, descriptor), timeout)
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


def serve(transport, args) -> None:
    from hivemind.utils import get_dht_time

    threading.Thread(target=watch_addresses, args=(transport,), daemon=True).start()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("serve", "fetch"))
    parser.add_argument("--peer", required=True, help="full multiaddr of a member (the bootstrap)")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--host", required=True, help="the address to listen on")
    parser.add_argument("--reachability", default="auto", choices=("auto", "public", "relayed"))
    parser.add_argument("--client-mode", action="store_true", help="serve nothing, take no part in the DHT's storage")
    parser.add_argument("--sizes", default="", help="serve: encoded sizes of the batches to publish, in bytes")
    parser.add_argument("--fetch-timeout", type=float, default=60.0, help="seconds one fetch (or serve) may take")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds joining the DHT may take")
    parser.add_argument("--life", type=float, default=600.0, help="seconds before it stops by itself")
    args = parser.parse_args()

    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.hivemind_transport import HivemindTransport

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
