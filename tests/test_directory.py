"""Reading a run's announcements out of DHT values (``node/swarm/directory.py``): an entry counts only when it
decodes, was signed by the key of the peer it describes, and expires no later than any peer may keep one.

Run: python -m pytest tests/test_directory.py -q
"""

from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils import DHTExpiration, ValueWithExpiration, get_dht_time
from hivemind.utils.crypto import RSAPrivateKey

from ftis.node.swarm.directory import Directory
from ftis.node.swarm.identity import peer_id_of_owner
from ftis.node.swarm.records import latest_expiration
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
