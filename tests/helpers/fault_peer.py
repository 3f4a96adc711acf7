"""A swarm peer in its own OS process, for the fault tests (``test_faults.py``) that kill it mid-transfer
(SIGKILL) or cut it off (SIGSTOP).

Run (from tests/): python -m helpers.fault_peer --peer MADDR --run-id RUN [--groups G] [--group-size S]
                                   [--chunk-pause S] [--ttl S]

Joins through ``--peer`` as a ``HivemindTransport`` on 127.0.0.1 and prints ``peer <peer id>``; then for
each line on its stdin publishes a batch (``--groups`` groups of ``--group-size`` completions; sequence
numbers 0, 1, ...) and prints ``published <round>``. It renews its announcement and serves its batches
until it is stopped or its stdin closes. With ``--chunk-pause`` it serves like a peer on a slow uplink:
the payload in 16 KiB chunks with that pause between them, printing ``serving <round> to <peer id>`` once
the first chunk is out and ``served <round> to <peer id>`` after the last, so a test can kill it
mid-transfer. SIGTERM shuts it down cleanly.
"""

import argparse
import asyncio
import sys

from helpers.swarm import TOKENIZER, make_batch  # run as ``python -m helpers...`` from tests/

CHUNK_BYTES = 16 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="full multiaddr of a member")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=3)
    parser.add_argument("--chunk-pause", type=float, default=0.0, help="seconds between 16 KiB chunks (0: at once)")
    parser.add_argument("--ttl", type=float, default=30.0, help="announcement_ttl_s")
    args = parser.parse_args()

    from hivemind.utils import get_dht_time

    from ftis.node.config import SwarmConfig
    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.dht.transport import HivemindTransport

    config = SwarmConfig(run_id=args.run_id, initial_peers=[args.peer], host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                         poll_interval_s=0.5, announce_interval_s=1.0, announcement_ttl_s=args.ttl)
    exit_on_sigterm()
    transport = HivemindTransport(config, TOKENIZER)
    try:
        if args.chunk_pause > 0:
            _serve_slowly(transport, args.chunk_pause)
        print(f"peer {transport.peer_id}", flush=True)
        for round_, _ in enumerate(sys.stdin):  # (what its peers send fills its buffer, then waits: no matter)
            transport.publish(make_batch(transport.peer_id, round_, get_dht_time(), run_id=args.run_id,
                                         groups=args.groups, group_size=args.group_size))
            print(f"published {round_}", flush=True)
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        transport.close()
    sys.exit(0)


def _serve_slowly(transport, pause_s: float) -> None:
    """Replace the transport's stream handler by one that trickles each payload (same framing)."""

    async def serve(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            round_ = int.from_bytes(await reader.readexactly(8), "big")
            fetcher = info.peer_id.to_base58()
            payload = transport._outbox.payload(round_) or b""
            writer.write(len(payload).to_bytes(8, "big"))
            for start in range(0, len(payload), CHUNK_BYTES):
                writer.write(payload[start:start + CHUNK_BYTES])
                await writer.drain()
                if start == 0:
                    print(f"serving {round_} to {fetcher}", flush=True)
                await asyncio.sleep(pause_s)
            print(f"served {round_} to {fetcher}", flush=True)
        finally:
            writer.close()

    async def replace() -> None:
        await transport._p2p.remove_binary_stream_handler(transport._handler)
        await transport._p2p.add_binary_stream_handler(transport._handler, serve)

    asyncio.run_coroutine_threadsafe(replace(), transport._loop).result(10)


if __name__ == "__main__":
    main()
