"""A swarm node in its own OS process, for tests that kill a node (SIGKILL) mid-run.

Run (from tests/): python -m helpers.swarm_peer --peer MADDR --run-id RUN [--interval 0.3]

Joins through ``--peer`` as a ``HivemindTransport`` on 127.0.0.1 with the short intervals of the
hivemind tests, prints ``peer <peer id>`` once it is in, then publishes a small batch (round 0, 1, ...)
every ``--interval`` seconds and drains what it receives, until it is killed. SIGTERM shuts it
down cleanly; SIGKILL leaves its DHT process and ``p2pd`` behind, which the test then reaps.
"""

import argparse
import sys
import time

from helpers.swarm import TOKENIZER, make_batch  # run as ``python -m helpers...`` from tests/


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="full multiaddr of a member")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between published batches")
    args = parser.parse_args()

    from hivemind.utils import get_dht_time

    from ftis.node.config import SwarmConfig
    from ftis.node.signals import Terminated, exit_on_sigterm
    from ftis.node.swarm.hivemind_transport import HivemindTransport

    config = SwarmConfig(run_id=args.run_id, initial_peers=[args.peer], host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                         poll_interval_s=0.2, announce_interval_s=1.0, announcement_ttl_s=30.0,
                         fetch_timeout_s=3.0, per_peer_quota=64, max_buffered_batches=256)
    exit_on_sigterm()
    transport = HivemindTransport(config, TOKENIZER)
    try:
        print(f"peer {transport.peer_id}", flush=True)
        round_ = 0
        while True:
            transport.publish(make_batch(transport.peer_id, round_, get_dht_time(), run_id=args.run_id))
            round_ += 1
            time.sleep(args.interval)
            transport.receive()
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        transport.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
