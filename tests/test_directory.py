"""Reading a run's announcements out of DHT values (``node/swarm/dht/directory.py``): an entry counts only when it
decodes, was signed by the key of the peer it describes, and expires no later than any peer may keep one.

Run: python -m pytest tests/test_directory.py -q
"""

from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils import DHTExpiration, ValueWithExpiration, get_dht_time
from hivemind.utils.crypto import RSAPrivateKey

from ftis.node.swarm.dht.directory import Directory, MembersReading
from ftis.node.swarm.dht.records import latest_expiration
from ftis.node.swarm.keys.identity import peer_id_of_owner
from ftis.node.swarm.transport import Member
from ftis.protocol.announcement import Announcement, encode_announcement


def entry(owner: bytes, expiration: DHTExpiration) -> tuple[bytes, ValueWithExpiration]:
    announcement = Announcement(run_id="run", peer_id=peer_id_of_owner(owner), model="m", adapter="full",
                                tokenizer="t", policy_version=0, published_batches=0, published_tokens=0,
                                updated_at=get_dht_time(), batches=())
    return owner, ValueWithExpiration(encode_announcement(announcement), expiration)


def test_an_entry_that_outlives_any_peers_ttl_is_rejected_against_its_owner():
    lasting, ghost = (RSASignatureValidator(RSAPrivateKey()).local_public_key for _ in range(2))
    shard = ValueWithExpiration(dict([entry(lasting, get_dht_time() + 30), entry(ghost, get_dht_time() + 3.2e7)]),
                                get_dht_time() + 30)
    reading = Directory().read([shard], expires_by=latest_expiration())
    assert [a.peer_id for a in reading.announcements] == [peer_id_of_owner(lasting)]
    assert [peer for peer, _ in reading.rejected] == [peer_id_of_owner(ghost)]
    assert len(reading.records) == 1 and reading.records[0] == shard.value[lasting].value
    # without a bound (a one-shot reader such as ``ftis-node status``), both are members
    assert len(Directory().read([shard]).announcements) == 2


def test_a_sampled_reading_estimates_the_members_in_all():
    members = [Member(f"peer-{k}", "m", "full", "tok", 0, 1, 1, 0.0) for k in range(3)]
    assert MembersReading(members, 4, 4).summary() == "read all 4 shards of the run"
    assert MembersReading(members, 4, 4).estimated_total == 3
    sampled = MembersReading(members, 16, 1024)
    assert not sampled.complete and sampled.estimated_total == 192
    assert sampled.summary() == "read 16 of 1024 shards at random: ~192 members in all (estimated)"
    assert MembersReading([], 1, 1).summary() == "read all 1 shard of the run"
