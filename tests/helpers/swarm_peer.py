"""A swarm node in its own OS process: for tests that kill a node (SIGKILL) mid-run, and for the NAT test,
which runs it inside a network namespace of ``helpers.netns``.

Run (from tests/): python -m helpers.swarm_peer --peer MADDR --run-id RUN [--host IP] [--interval 0.3]
                   [--fetch-timeout S] [--start-timeout S] [--life S] [--relay MADDR ...] [--relay-service]
                   [--reachability auto|public|relayed] [--client-mode] [--quiet] [--publish-when-reached]
                   [--groups N] [--group-size N] [--relay-data-limit BYTES]

Joins through ``--peer`` as a ``HivemindTransport`` listening on ``--host`` (127.0.0.1) with the short intervals
of the hivemind tests and the default reachability ("auto": AutoNAT finds out, and a node it finds unreachable
reserves a relay slot on its initial peer), prints ``peer <peer id>`` once it is in, then publishes a small
batch (round 0, 1, ...) every ``--interval`` seconds, prints ``got <peer id> <round>`` for each batch it
receives (``--quiet``: none, it only fetches), ``addrs <multiaddr> ...`` whenever its advertised addresses change,
``reach <how> <relay id>...`` whenever how it announces peers reach it changes, and ``stats <relayed bytes
received> <relayed bytes sent> <relay service bytes>`` every second, until it is killed or
``--life`` seconds have passed (it never outlives a test that lost it). SIGTERM shuts it down cleanly;
SIGKILL leaves its DHT process and ``p2pd`` behind, which the test then reaps.
"""

import argparse
import sys
import time

from helpers.swarm import TOKENIZER, make_batch  # run as ``python -m helpers...`` from tests/


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="full multiaddr of a member")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between published batches")
    parser.add_argument("--fetch-timeout", type=float, default=3.0, help="seconds one fetch may take")
    parser.add_argument("--start-timeout", type=float, default=60.0, help="seconds joining the DHT may take")
    parser.add_argument("--life", type=float, default=300.0, help="seconds before it stops by itself")
    parser.add_argument("--relay", action="append", default=[], help="[swarm] relays (default: the --peer)")
    parser.add_argument("--relay-service", action="store_true", help="offer a relay ([swarm] relay_service)")
    parser.add_argument("--reachability", default="auto")
    parser.add_argument("--client-mode", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="publish nothing")
    parser.add_argument("--groups", type=int, default=2, help="groups per batch (with --group-size: its size)")
    parser.add_argument("--group-size", type=int, default=3)
    parser.add_argument("--relay-data-limit", type=int, default=1 << 30, help="[swarm] relay_data_limit_bytes")
    parser.add_argument("--publish-when-reached", action="store_true",
                        help="publish once peers reach it (relayed or direct), as a real node's first batch comes "
                             "after a generation round: batches announced before would cost it failed fetches")
    args = parser.parse_args()

    from hivemind.utils import get_dht_time

    from ftis.node.config import SwarmConfig
    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.dht.transport import HivemindTransport

    config = SwarmConfig(run_id=args.run_id, initial_peers=[args.peer], host_maddrs=[f"/ip4/{args.host}/tcp/0"],
                         poll_interval_s=0.2, announce_interval_s=1.0, announcement_ttl_s=30.0,
                         fetch_timeout_s=args.fetch_timeout, start_timeout_s=args.start_timeout, per_peer_quota=64,
                         max_buffered_batches=256, relays=args.relay, relay_service=args.relay_service,
                         reachability=args.reachability, client_mode=args.client_mode,
                         relay_data_limit_bytes=args.relay_data_limit)
    exit_on_sigterm()
    transport = HivemindTransport(config, TOKENIZER)
    try:
        print(f"peer {transport.peer_id}", flush=True)
        round_, addrs, reach, end, next_stats = 0, [], "", time.monotonic() + args.life, 0.0
        while time.monotonic() < end:
            if not args.quiet and (not args.publish_when_reached or reach.split(" ")[0] in ("relayed", "direct")):
                transport.publish(make_batch(transport.peer_id, round_, get_dht_time(), run_id=args.run_id,
                                             groups=args.groups, group_size=args.group_size))
            round_ += 1
            time.sleep(args.interval)
            for received in transport.receive():
                print(f"got {received.peer_id} {received.batch.round}", flush=True)
            if transport.visible_maddrs != addrs:
                addrs = transport.visible_maddrs
                print("addrs " + " ".join(addrs), flush=True)
            stats = transport.stats()
            own = [m for m in transport.members() if m.peer_id == transport.peer_id]
            now_reach = " ".join([stats.reach, *(own[0].relays if own and own[0].reach == stats.reach else ())])
            if now_reach != reach:
                reach = now_reach
                print(f"reach {reach}", flush=True)
            if time.monotonic() >= next_stats:
                next_stats = time.monotonic() + 1.0
                service = stats.relay.relayed_bytes if stats.relay else -1
                print(f"stats {stats.relayed_received_bytes} {stats.relayed_sent_bytes} {service}", flush=True)
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        transport.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
