"""Reading the directory and fetching peers' batches, for ``HivemindTransport``.

Every ``poll_interval_s`` (sooner when ``poll_now`` asks, never closer than ``_MIN_POLL_GAP_S``) the poller reads
the shards its ``Sampler`` chooses (all of them in a small swarm; the next few of its own random order in a large
one) in one DHT traversal (``directory.read_shards``), checks each announcement was signed by the key of the peer
it describes, remembers what its last few polls read (``members``), and fetches the batches its ``Inbox`` wants
over a P2P stream from that peer, concurrently, each under one deadline: every fresh batch, or, under a fetch
budget, the freshest from distinct peers up to the budget (``sampling.py``). A member that announces itself
unreachable (client mode) is listed but not fetched from; before fetching from one that announces itself relayed,
the fetcher hands ``p2pd`` the circuit addresses it trusts for it (``circuits.py``): peer routing alone does not
find a node behind a NAT.

A fetch that fails in transit (refused connection, stream closed early, deadline passed) is tried again up to
``fetch_retries`` times, after ``fetch_retry_backoff_s`` doubling each time and only while the peer's latest
announcement still lists the batch, it is within the max age and the peer is not muted: a stalling peer costs one
deadline per attempt and is asked again only after the backoff. A payload refused on its contents (too large,
wrong hash, undecodable) is never asked for again.

A download (``stream.py``) refuses a length above the announced size before reading the body; the payload
is then checked, charged and decoded (``transport_base.open_fetched``) on the decoding thread the transport owns,
one payload at a time: the loop never waits on a decode, and one batch's inflated columns at most are being built.
A stream that ends early after delivering some bytes is followed by another from where it ended, within the same
deadline; a stream that delivers nothing ends the attempt.

Runs on the transport's network loop; the training thread reads ``members`` (replaced whole at each poll).
"""

import asyncio
import contextlib
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import hivemind
from hivemind.p2p import P2P, PeerID

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.calls import DHTCalls
from ftis.node.swarm.dht.directory import Directory, read_shards
from ftis.node.swarm.dht.records import latest_expiration
from ftis.node.swarm.dht.sampling import ReadSettings, Sampler, read_settings
from ftis.node.swarm.dht.slots import FairSlots
from ftis.node.swarm.dht.stream import HEADER, SLOTS_PER_PEER, FetchDeadline, fetch_deadline, relayed
from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.payload import Rejected
from ftis.node.swarm.exchange.reasons import FETCH_FAILED, NOT_AS_ANNOUNCED, TOO_LARGE
from ftis.node.swarm.reach.circuits import Encoded, circuits_to_dial, maddr_bytes, relay_ids
from ftis.node.swarm.reach.reachability import reach_settings
from ftis.node.swarm.transport import Member, member_of
from ftis.node.swarm.transport_base import open_fetched, refuse
from ftis.protocol.announcement import Announcement, BatchDescriptor
from ftis.protocol.limits import MAX_PAYLOAD_BYTES

logger = logging.getLogger(__name__)

_READ_SIZE = 1 << 20  # a fetch reads the payload in pieces of at most this many bytes
_EMPTY_STREAMS = 3  # streams in a row that bring nothing, once some bytes arrived, before a fetch attempt fails
_EMPTY_STREAM_PAUSE_S = 0.2  # ...after the n-th of them, n times this
_MIN_POLL_GAP_S = 0.05  # poll_now never makes announcement reads closer than this


def retry_delay(backoff_s: float, attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (0 for the first) before the next."""
    return backoff_s * 2**attempt


@dataclass(frozen=True)
class FetchSettings:
    """What of ``[swarm]`` a fetcher reads: the run's directory, how it is read and how often, the fetch budget and
    its horizon, and each fetch's slots, deadline and retries."""

    run_id: str
    shards: int
    read: ReadSettings
    read_beam_size: int | None
    poll_interval_s: float
    fetch_budget: int
    fetch_horizon_s: float
    max_fetches: int
    deadline: FetchDeadline
    retries: int
    retry_backoff_s: float
    relays: tuple[str, ...]  # this node's own relays (a peer relayed through one is dialled through it)


def fetch_settings(swarm: SwarmConfig) -> FetchSettings:
    return FetchSettings(swarm.run_id, swarm.shards, read_settings(swarm), swarm.read_beam_size or None,
                         swarm.poll_interval_s, swarm.fetch_budget, swarm.fetch_horizon(), swarm.max_concurrent_fetches,
                         fetch_deadline(swarm), swarm.fetch_retries, swarm.fetch_retry_backoff_s,
                         reach_settings(swarm).relays)


class Fetcher:
    def __init__(self, config: FetchSettings, dht: hivemind.DHT, p2p: P2P, handler: str, peer_id: str, inbox: Inbox,
                 calls: DHTCalls, decoder: ThreadPoolExecutor):
        """``handler``: the run's stream handler on the peers; ``peer_id``: this node's (its own announcement is
        not a member); ``decoder``: the one thread fetched payloads are opened on."""
        self._config, self._dht, self._p2p, self._handler, self._peer_id = config, dht, p2p, handler, peer_id
        self._inbox, self._calls, self._decoder = inbox, calls, decoder
        self.members: dict[str, Member] = {}
        self._listed: dict[str, frozenset[int]] = {}  # peer id -> rounds its latest announcement lists
        self._circuits: dict[str, tuple[str, ...]] = {}  # peer id -> circuit addresses it announces (relayed)
        self._own_relays = relay_ids(list(config.relays))
        self._directory = Directory()
        self._rng = random.Random()
        self._sampler: Sampler[Announcement] = Sampler(config.read, self._rng)
        self._slots = FairSlots(config.max_fetches, SLOTS_PER_PEER)
        self._soon = asyncio.Event()  # poll_now: read the announcements without waiting out the period
        self.fetches: set[asyncio.Task] = set()
        self.poll_failures = 0  # reads of the peers' announcements that failed
        self.relayed_received = 0  # payload bytes fetched over a relayed connection

    def poll_soon(self) -> None:
        """Read the announcements now rather than at the next period; on the loop."""
        self._soon.set()

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a failed poll is retried next period, never fatal
                self.poll_failures += 1
                logger.warning("reading announcements failed: %s: %s", type(error).__name__, error)
            # The rest of the period, unless poll_soon asks sooner (one asked for during the poll counts; the
            # gap keeps a node that keeps asking to a few reads a second).
            period = self._config.poll_interval_s
            await asyncio.sleep(max(0.0, min(_MIN_POLL_GAP_S, period) - (time.monotonic() - started)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, period - (time.monotonic() - started))):
                    await self._soon.wait()
            self._soon.clear()

    async def _poll_once(self) -> None:
        config = self._config
        future = read_shards(self._dht, config.run_id, config.shards, only=self._sampler.shards_to_read(),
                             beam_size=config.read_beam_size)
        values = await self._calls.result(future)
        # A record that expires later than any peer may store one for is meant to outlive its owner (a ghost
        # member): refused, as every node's DHT refuses to store it (records.py).
        reading = self._directory.read(values, expires_by=latest_expiration())
        for peer_id, record in reading.rejected:
            self._inbox.reject_announcement(peer_id, record)
        self._sampler.remember(
            (announcement.peer_id, announcement)
            for announcement, record in zip(reading.announcements, reading.records, strict=True)
            if announcement.peer_id != self._peer_id and self._inbox.admit_announcement(announcement, record))
        remembered = self._sampler.listings()
        self.members = {peer_id: member_of(announcement) for peer_id, announcement in remembered.items()}
        self._listed = {peer_id: frozenset(d.round for d in announcement.batches)
                        for peer_id, announcement in remembered.items()}
        self._circuits = {peer_id: announcement.reach.addrs for peer_id, announcement in remembered.items()}
        # one that says no one can dial it is not worth a fetch slot
        dialable = [a for a in remembered.values() if a.reach.how != "unreachable"]
        wanted = self._inbox.choose(dialable, config.fetch_budget, config.poll_interval_s, self._rng,
                                    config.fetch_horizon_s)
        for announcement, descriptor in wanted:
            task = asyncio.create_task(self._fetch(announcement.peer_id, descriptor))
            self.fetches.add(task)
            task.add_done_callback(self.fetches.discard)

    async def _fetch(self, peer_id: str, descriptor: BatchDescriptor) -> None:
        attempt = 0
        while True:
            try:
                async with self._slots.hold(peer_id):  # not held while backing off
                    deadline, started = self._config.deadline(descriptor.bytes), time.monotonic()
                    data, via_relay = await asyncio.wait_for(self.download(peer_id, descriptor), deadline)
                    lateness = 2 * (time.monotonic() - started) / deadline - 1  # > 0 in the deadline's second half
                batch = await asyncio.get_running_loop().run_in_executor(self._decoder, open_fetched, self._inbox,
                                                                         peer_id, descriptor, data)
            except Rejected as rejected:  # the peer answered on the stream, and the answer is final
                refuse(self._inbox, peer_id, descriptor, rejected)
                return
            except asyncio.CancelledError:
                self._inbox.fail(peer_id, descriptor, FETCH_FAILED)
                raise
            except Exception as error:  # timeouts, refused connections, streams closed early: maybe transient
                failure = f"{type(error).__name__}: {error}"
                if attempt < self._config.retries and self._still_offered(peer_id, descriptor):
                    delay = retry_delay(self._config.retry_backoff_s, attempt)
                    logger.info("fetching batch %s of %s failed (%s); retrying in %.1f s", descriptor.round, peer_id,
                                failure, delay)
                    attempt += 1
                    await asyncio.sleep(delay)
                    continue
                self._inbox.fail(peer_id, descriptor, FETCH_FAILED)
                logger.info("fetching batch %s of %s failed after %d attempts: %s", descriptor.round, peer_id,
                            attempt + 1, failure)
                return
            if batch is not None:  # else refused on its contents, and counted
                self._inbox.deliver(peer_id, descriptor, batch, len(data), lateness)
                self.relayed_received += len(data) if via_relay else 0
            return

    async def _dial_circuits(self, peer_id: str) -> None:
        """Hand ``p2pd`` the circuit addresses to reach a relayed member at (``circuits.py``); no-op otherwise.
        A failure here is left to the stream call that follows, which then fails as a fetch does."""
        encoded = []
        for circuit in circuits_to_dial(self._circuits.get(peer_id, ()), self._own_relays, set(self.members)):
            with contextlib.suppress(ValueError):
                encoded.append(Encoded(maddr_bytes(circuit)))
        if encoded:
            try:  # hivemind's P2P has no public connect with addresses; its daemon client has
                await self._p2p._client.connect(PeerID.from_base58(peer_id), encoded)
            except Exception as error:
                logger.debug("dialling %s through its relays failed: %s: %s", peer_id, type(error).__name__, error)

    def _still_offered(self, peer_id: str, descriptor: BatchDescriptor) -> bool:
        """Worth another attempt: the peer's latest announcement lists the batch, it is not stale, and the
        peer was not muted meanwhile."""
        return (descriptor.round in self._listed.get(peer_id, ()) and self._inbox.fresh(descriptor)
                and not self._inbox.muted(peer_id))

    async def download(self, peer_id: str, descriptor: BatchDescriptor) -> tuple[bytes, bool]:
        """The payload, and whether any of it came over a relayed connection: one stream, or more when one ends
        early after delivering some of it (see the module's docstring); the caller's deadline bounds them all.
        A stream that brings nothing, after some bytes arrived or over a relayed connection (one the relay has
        just reset), is tried again after a short pause, up to ``_EMPTY_STREAMS`` in a row."""
        data, length, empty = bytearray(), -1, 0
        via: list[bool] = []  # whether each stream opened ran over a relayed connection
        while len(data) != length:
            before = len(data)
            try:
                length = await self._download_piece(peer_id, descriptor, data, length, via)
            except Rejected:
                raise
            except Exception:  # a stream cut or refused (p2pd's errors are of several types): after some bytes or
                if not data and not any(via):  # over a relay, try again below; else the attempt fails
                    raise
            if len(data) > before:
                empty = 0
            elif len(data) < length or length == -1:
                empty += 1
                if (not data and not any(via)) or empty > _EMPTY_STREAMS:
                    raise ConnectionError(f"the stream ended after {len(data)} of {length} bytes")
                await asyncio.sleep(_EMPTY_STREAM_PAUSE_S * empty)
        return bytes(data), any(via)

    async def _download_piece(self, peer_id: str, descriptor: BatchDescriptor, data: bytearray, length: int,
                              via: list[bool]) -> int:
        """One stream: asks for the payload from ``len(data)`` on and appends what arrives to ``data``; returns
        the payload's length (checked against the announcement and against ``length``, what an earlier stream
        said; -1 for none). Appends to ``via`` whether the stream runs over a relayed connection."""
        await self._dial_circuits(peer_id)
        info, reader, writer = await self._p2p.call_binary_stream_handler(PeerID.from_base58(peer_id), self._handler)
        via.append(relayed(info))
        try:
            writer.write(descriptor.round.to_bytes(HEADER, "big") + len(data).to_bytes(HEADER, "big"))
            await writer.drain()
            answer = int.from_bytes(await reader.readexactly(HEADER), "big")
            if answer == 0:
                raise Rejected(FETCH_FAILED, "the peer no longer serves this batch")
            if answer > descriptor.bytes or answer > MAX_PAYLOAD_BYTES:  # before reading a byte of it
                raise Rejected(TOO_LARGE, f"the peer sends {answer} bytes, {descriptor.bytes} announced")
            if length not in (-1, answer):
                raise Rejected(NOT_AS_ANNOUNCED, f"the peer said {length} bytes, then {answer}")
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while len(data) < answer:
                    piece = await reader.read(min(_READ_SIZE, answer - len(data)))
                    if not piece:
                        break
                    data += piece
            return answer
        finally:
            writer.close()
