"""The fetch budget on a real swarm on 127.0.0.1: a node that fetches one batch at a time gets the freshest
first, from distinct peers, and the next only once its trainer took the last.

Run: python -m pytest tests/test_sampling_hivemind.py -q      (marker ``hivemind``; about 15 s)

(Sampled reads without a budget pass every transport contract: ``test_transport_contract.py``,
``hivemind-sampled``.)
"""

import random
import time

import pytest
from helpers.hivemind_swarm import Swarm, start_bootstrap
from hivemind.utils import get_dht_time

from ftis.node.swarm.dht.directory import read_members
from ftis.node.swarm.dht.records import shard_of

pytestmark = pytest.mark.hivemind

RUN = "sampling-test"
SETTINGS = dict(run_id=RUN, host_maddrs=["/ip4/127.0.0.1/tcp/0"], poll_interval_s=0.2, announce_interval_s=1.0,
                announcement_ttl_s=30.0, max_age_s=60.0, fetch_timeout_s=5.0, shards=16, shards_per_poll=4,
                want_peers=0, remember_polls=4, read_beam_size=2)


def test_a_budget_of_one_fetches_the_freshest_batch_first_and_the_next_once_the_trainer_took_it(tmp_path):
    swarm = Swarm(start_bootstrap(tmp_path, SETTINGS), SETTINGS)
    try:
        publishers = swarm.join(3)
        now = get_dht_time()
        for publisher, age in zip(publishers, (30.0, 20.0, 10.0), strict=True):  # the last is the freshest
            publisher.publish(created_at=now - age)
        swarm.wait_until(lambda: len(read_members(swarm.bootstrap, RUN, SETTINGS["shards"]).members) == 3,
                         "the three announcements are in the DHT")  # before the node reads: it sees all three
        for seed in range(4):  # a reader sampling 4 of the 16 shards sees exactly the members of the shards it drew
            drawn = random.Random(seed).sample(range(16), 4)
            reading = read_members(swarm.bootstrap, RUN, 16, sample=4, rng=random.Random(seed))
            assert {m.peer_id for m in reading.members} == {
                p.peer_id for p in publishers if shard_of(p.peer_id, 16) in drawn}
            assert (reading.shards_read, reading.complete) == (4, False)
            assert reading.estimated_total == 4 * len(reading.members)
        # its first read takes every shard (a sampled first read might see the oldest alone, and fetch it first)
        (node,) = swarm.join(1, polled=False, fetch_budget=1, shards_per_poll=0)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            time.sleep(1.0)  # the node has read every shard several times over: all three are offered
            arrived = node.transport.receive()
            assert len(arrived) <= 1, arrived  # never more than the budget waits for the trainer
            got += [received.peer_id for received in arrived]
        assert got == [p.peer_id for p in reversed(publishers)]  # freshest first
    finally:
        swarm.close()
