"""The real transport: signed announcements in a Hivemind DHT, payloads over libp2p streams.

Shape (docs/swarm.md): a peer stores one small signed announcement (``protocol/announcement.py``) under
its run's shard key and renews it before it expires; every ``poll_interval_s`` it reads the shards its
``Sampler`` chooses (all of them in a small swarm; the next few of its own random order in a large one),
checks each announcement was signed by the key of the peer it describes, remembers what its last few
polls read, and fetches the batches its ``Inbox`` wants over a P2P stream from that peer, concurrently,
each under one deadline: every fresh batch, or, under a fetch budget, the freshest from distinct peers up
to the budget (``sampling.py``). A poll's shard keys are read in one DHT traversal
(``directory.read_shards``).

How peers reach this node (``reachability.own_reach``: directly, through a relay's circuit, not at all) is found
again before each announcement, from the addresses ``p2pd`` advertises and AutoNAT's verdict among libp2p's own
counters (``p2pd_metrics.py``), and said in the announcement; a change is logged, and a node that peers outside
its network cannot fetch from says so plainly. A member that announces itself unreachable (client mode) is
listed but not fetched from. Payload bytes fetched and served over a relayed connection are counted apart
(``TransportStats.relayed_*``). Before fetching from a member that announces itself relayed, the node hands
``p2pd`` the circuit addresses it trusts for it (``circuits.py``): peer routing alone does not find a node behind
a NAT.

A fetch that fails in transit (refused connection, stream closed early, deadline passed) is tried
again up to ``fetch_retries`` times, after ``fetch_retry_backoff_s`` doubling each time and only while
the peer's latest announcement still lists the batch, it is within the max age and the peer is not
muted: a stalling peer costs one deadline per attempt and is asked again only after the backoff. A
payload refused on its contents (too large, wrong hash, undecodable) is never asked for again.

Stream exchange (handler ``<run prefix>.batch``): the fetcher sends the batch's round and the offset it wants the
payload from (8 bytes each, big-endian); the server answers with the payload's whole length (8 bytes, big-endian; 0
when it no longer holds that batch), then the payload from that offset. The fetcher refuses a length above the
announced size before reading the body, then checks size, SHA-256 and strict decode (``Inbox.open``: charged what
decoding takes before anything is inflated), on a thread of its own, one payload at a time: the loop never waits on
a decode, and one batch's inflated columns at most are being built. A stream that ends early after delivering some
bytes is followed by another from where it ended, within the same deadline: a relayed connection may be cut after a
fixed number of bytes (p2pd's built-in relay: 128 KiB each way, docs/nat.md), and a new one carries the rest. A
stream that delivers nothing ends the attempt.

Threads: all network work runs on one asyncio loop in a daemon thread that this object owns (the
DHT's P2P replica is bound to the loop that first uses it). ``publish``, ``receive``, ``members``,
``stats`` are called from the training thread and never wait on the network. Fetched payloads are decoded on
one more thread (``_decoder``). ``close`` stops the loop and the decoder and shuts the DHT and its ``p2pd`` down.

Time: batch ages and announcement times follow ``clock`` (the DHT's time by default; tests move it
on instead of sleeping); the DHT's record expirations always follow the DHT's own time.
"""

import asyncio
import contextlib
import logging
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import hivemind
from hivemind.p2p import PeerID
from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo
from hivemind.utils import get_dht_time
from hivemind.utils.mpfuture import MPFuture

from ftis.node.config import SwarmConfig
from ftis.node.swarm.circuits import Encoded, circuits_to_dial, maddr_bytes, relay_ids
from ftis.node.swarm.directory import Directory, read_shards
from ftis.node.swarm.identity import IdentityError, ensure_identity, signing_key
from ftis.node.swarm.inbox import (
    FETCH_FAILED,
    NOT_AS_ANNOUNCED,
    TOO_LARGE,
    Inbox,
    Rejected,
    inbox_limits,
)
from ftis.node.swarm.outbox import Outbox, members_with_own, transport_stats
from ftis.node.swarm.p2pd_metrics import RelayCounters, free_port, read_counters
from ftis.node.swarm.reachability import RelayAwareDHT, own_reach, p2p_options, p2pd_flags, relays_of
from ftis.node.swarm.records import latest_expiration, record_validators, run_prefix, shard_key, shard_of
from ftis.node.swarm.reputation import PeerScore, reputation_settings
from ftis.node.swarm.sampling import Sampler, read_settings
from ftis.node.swarm.slots import FairSlots
from ftis.node.swarm.transport import Member, ReceivedBatch, SwarmError, TransportStats, member_of
from ftis.protocol import RolloutBatch
from ftis.protocol.announcement import Announcement, BatchDescriptor, Reach, encode_announcement
from ftis.protocol.limits import MAX_PAYLOAD_BYTES

logger = logging.getLogger(__name__)

_HEADER = 8  # bytes of a round, an offset or a length on the stream
_READ_SIZE = 1 << 20  # a fetch reads the payload in pieces of at most this many bytes
_EMPTY_STREAMS = 3  # streams in a row that bring nothing, once some bytes arrived, before a fetch attempt fails
_EMPTY_STREAM_PAUSE_S = 0.2  # ...after the n-th of them, n times this
_REQUEST_TIMEOUT_S = 5.0  # a client that does not send its request in time is dropped
_SLOTS_PER_PEER = 2  # fetches from, and serves to, one peer at once
_WRITE_SLICE = 64 * 1024  # a served payload goes out in slices of this many bytes, each awaited


def fetch_deadline(config: SwarmConfig, size: int) -> float:
    """Seconds one fetch of a ``size``-byte payload may take, connect to last byte: ``fetch_base_s`` plus the
    time at ``fetch_min_bytes_per_s``, at most ``fetch_timeout_s``. A slow peer holds a fetch slot no longer
    than its payload's size justifies."""
    return min(config.fetch_timeout_s, config.fetch_base_s + size / config.fetch_min_bytes_per_s)
_IDENTIFY_TIMEOUT_S = 5.0  # asking p2pd for this node's addresses, before an announcement
_LAST_CALLS_S = 1.0  # how long close() waits for DHT calls in flight (see _stop)
_DHT_CALL_TIMEOUT_S = 60.0  # an announcement's store or a poll's read unanswered this long has failed (_dht_call)
_MIN_POLL_GAP_S = 0.05  # poll_now never makes announcement reads closer than this


def start_dht(config: SwarmConfig, identity_path: Path, *, announce: bool,
              metrics_port: int | None = None) -> tuple[hivemind.DHT, bytes]:
    """A started DHT peer with this run's validators; returns it and the subkey it signs with. Its ``p2pd``
    serves libp2p's counters on loopback at ``metrics_port`` when given (``p2pd_metrics.py``).

    The identity file is created when missing; a new one is not checked for being in use (hivemind's
    check starts a throwaway daemon, which doubles start-up).
    """
    fresh = not identity_path.exists()
    try:
        identity_path = ensure_identity(identity_path)
        key = signing_key(identity_path) if announce else None
    except IdentityError as error:
        raise SwarmError(str(error)) from None
    validators = record_validators(config.run_id, config.shards, key)
    try:
        dht = RelayAwareDHT(
            p2pd_flags=p2pd_flags(config, metrics_port),
            initial_peers=list(config.initial_peers) or None,
            start=False,
            host_maddrs=list(config.host_maddrs),
            announce_maddrs=list(config.announce_maddrs) or None,
            identity_path=str(identity_path),
            check_if_identity_free=not fresh,
            client_mode=config.client_mode,
            record_validators=validators,
            startup_timeout=config.start_timeout_s,  # p2pd's own start: hivemind's default 15 s would cap it
            **p2p_options(config),
        )
        dht.run_in_background(await_ready=True, timeout=config.start_timeout_s)
    except Exception as error:  # hivemind raises many types here (P2PDaemonError, TimeoutError, ValueError...)
        raise SwarmError(f"cannot join the swarm: {type(error).__name__}: {error}") from None
    return dht, validators[0].local_public_key


def peer_id_of(dht: hivemind.DHT, timeout: float) -> str:
    """The DHT peer's id (base58), asked of its process within ``timeout`` s (``dht.peer_id`` waits without a limit,
    and hivemind's process can lose a call: see ``HivemindTransport._dht_call``)."""
    return dht.run_coroutine(hivemind.DHT._get_peer_id, return_future=True).result(timeout).to_base58()


async def _settled(future: MPFuture) -> None:
    """Wait until ``future`` is done, however it ends."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await future


class DHTCallLost(RuntimeError):
    """hivemind's DHT process destroyed the task running a call before it answered."""


def retry_delay(backoff_s: float, attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (0 for the first) before the next."""
    return backoff_s * 2**attempt


class HivemindTransport:
    def __init__(self, config: SwarmConfig, tokenizer: str, clock: Callable[[], float] = get_dht_time,
                 max_text_bytes: int | None = None):
        """``max_text_bytes``: the longest completion text this node could train on (``InboxLimits``); None: the
        protocol's bound alone."""
        self._config = config
        self._scratch: Path | None = None
        identity = config.identity_path
        if identity is None:  # a fresh identity per run, still a file: the peer id and the signing key agree
            self._scratch = Path(tempfile.mkdtemp(prefix="ftis-identity-"))
            identity = self._scratch / "identity.key"
        self._metrics_port = free_port()
        try:
            self._dht, self._owner = start_dht(config, identity, announce=True, metrics_port=self._metrics_port)
        finally:  # p2pd and the signer have read a fresh key by now: nothing of it stays on disk, even if killed
            self._remove_scratch()
        try:
            self._peer_id = peer_id_of(self._dht, config.start_timeout_s)
        except Exception as error:
            self._dht.shutdown()
            raise SwarmError(f"cannot join the swarm: its DHT process did not say its peer id: "
                             f"{type(error).__name__}: {error}") from None
        self._key = shard_key(config.run_id, shard_of(self._peer_id, config.shards))
        self._handler = f"{run_prefix(config.run_id)}.batch"
        self._outbox = Outbox(config.run_id, self._peer_id, keep=config.keep_batches, clock=clock)
        self._inbox = Inbox(config.run_id, tokenizer, replace(inbox_limits(config), max_text_bytes=max_text_bytes),
                            clock=clock, reputation=reputation_settings(config))
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="ftis-decode")  # fetched payloads, one at a time
        self._members: dict[str, Member] = {}
        self._listed: dict[str, frozenset[int]] = {}  # peer id -> rounds its latest announcement lists
        self._circuits: dict[str, tuple[str, ...]] = {}  # peer id -> circuit addresses it announces (relayed)
        self._own_relays = relay_ids(relays_of(config))
        self._directory = Directory()
        self._rng = random.Random()
        self._sampler: Sampler[Announcement] = Sampler(read_settings(config), self._rng)
        self._closed = False
        self._serves_turned_away = self._announce_failures = self._poll_failures = 0  # the network thread counts
        self._relayed_received = self._relayed_sent = 0  # ...and these
        self._reach = Reach()
        self._relay: RelayCounters | None = None
        self._visible: list[str] = []  # this node's addresses, as last read from p2pd
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ftis-swarm", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(config.start_timeout_s)
        except Exception as error:
            self.close()
            raise SwarmError(f"cannot start the exchange: {type(error).__name__}: {error}") from None

    # ---------------------------------------------------------------- the training thread's side

    @property
    def peer_id(self) -> str:
        return self._peer_id

    @property
    def visible_maddrs(self) -> list[str]:
        """Where peers reach this node now: behind a NAT, ``<relay>/p2p-circuit/p2p/<us>`` once a slot is held.

        Asked of p2pd through the network thread's connection, within a time limit; when p2pd does not answer in
        time, the addresses last read. (Not through ``hivemind.DHT``, whose calls from this thread have no time
        limit: a call its process drops would hang the caller for good.)
        """
        self._check_open()
        future = asyncio.run_coroutine_threadsafe(self._read_visible(), self._loop)
        try:
            return future.result(_IDENTIFY_TIMEOUT_S + 1.0)
        except Exception as error:
            future.cancel()
            logger.debug("cannot read this node's addresses: %s: %s", type(error).__name__, error)
            return list(self._visible)

    def publish(self, batch: RolloutBatch) -> BatchDescriptor:
        self._check_open()
        descriptor = self._outbox.add(batch)
        self._loop.call_soon_threadsafe(self._announce_now.set)
        return descriptor

    def receive(self, max_batches: int | None = None) -> list[ReceivedBatch]:
        self._check_open()
        return self._inbox.drain(max_batches)

    def poll_now(self) -> None:
        self._check_open()
        self._loop.call_soon_threadsafe(self._poll_soon.set)

    def members(self) -> list[Member]:
        return members_with_own(self._members, self._outbox, self._peer_id)

    def stats(self) -> TransportStats:
        stats = transport_stats(self._inbox, self._outbox)
        stats.serves_turned_away, stats.announce_failures, stats.poll_failures = (
            self._serves_turned_away, self._announce_failures, self._poll_failures)
        stats.relay = self._relay
        stats.relayed_received_bytes, stats.relayed_sent_bytes = self._relayed_received, self._relayed_sent
        return stats

    def report_filtered(self, peer_id: str, batches: int, completions: int, filtered: int) -> None:
        self._inbox.report_filtered(peer_id, batches, completions, filtered)

    def report_fault(self, peer_id: str, reason: str) -> None:
        self._inbox.report_fault(peer_id, reason)

    def scores(self) -> dict[str, PeerScore]:
        return self._inbox.scores()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            # A DHT read that _stop gave up waiting for still gets its answer later, and hivemind's future
            # then wakes the loop it was awaited on; it leaves a closed loop alone.
            self._loop.close()
        self._decoder.shutdown(cancel_futures=True)  # a decode under way is bounded: it ends
        self._dht.shutdown()  # ends the DHT process and its p2pd
        self._remove_scratch()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the transport is closed")

    def _remove_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    # ---------------------------------------------------------------- the network thread's side

    async def _start(self) -> None:
        self._announce_now = asyncio.Event()
        self._poll_soon = asyncio.Event()  # poll_now: read the announcements without waiting out the period
        self._fetch_slots = FairSlots(self._config.max_concurrent_fetches, _SLOTS_PER_PEER)
        self._serve_slots = FairSlots(self._config.max_concurrent_serves, _SLOTS_PER_PEER)
        self._p2p = await self._dht.replicate_p2p()
        await self._p2p.add_binary_stream_handler(self._handler, self._serve)
        self._fetches: set[asyncio.Task] = set()
        self._dht_calls: set[MPFuture] = set()  # stores and reads awaited on this loop, until they finish
        self._tasks = [asyncio.create_task(self._announcer()), asyncio.create_task(self._poller())]

    async def _stop(self) -> None:
        try:
            for task in [*self._tasks, *self._fetches]:
                task.cancel()
            await asyncio.gather(*self._tasks, *self._fetches, return_exceptions=True)
            # A DHT call the cancelled tasks were awaiting still gets its answer, and hivemind then wakes
            # this loop for it: let that happen while the loop runs, or it leaves a never-finished task.
            pending = [future for future in self._dht_calls if not future.done()]
            if pending:
                await asyncio.wait([asyncio.create_task(_settled(f)) for f in pending], timeout=_LAST_CALLS_S)
            with contextlib.suppress(Exception):
                await self._p2p.remove_binary_stream_handler(self._handler)
        finally:
            # The replica's own tasks (handler listener, daemon connection reader/writer) would stay pending
            # on this loop and be destroyed with "Event loop is closed" tracebacks once the loop is closed:
            # close the replica (p2pd goes with the DHT) and let every task here finish, whatever happened.
            with contextlib.suppress(Exception):
                await self._p2p.shutdown()
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    async def _dht_call(self, future: MPFuture) -> object:
        """The result of a DHT call made with ``return_future=True``; ``_stop`` waits for it if need be.

        hivemind's process can lose a call: the task running it is destroyed, and the caller gets
        ``GeneratorExit`` or nothing at all. Either is an ordinary failure here (``DHTCallLost``, or ``TimeoutError``
        after ``_DHT_CALL_TIMEOUT_S``), which the announcer and the poller count and retry; neither ends them.
        """
        self._dht_calls.add(future)  # touched on this loop only (a done-callback would run on hivemind's thread)
        try:
            async with asyncio.timeout(_DHT_CALL_TIMEOUT_S):
                return await future
        except TimeoutError:
            if future.done():  # hivemind's own time limit
                raise
            self._dht_calls.discard(future)  # lost, or hopelessly late: close() does not wait for it
            raise TimeoutError(f"the DHT did not answer within {_DHT_CALL_TIMEOUT_S:g} s") from None
        except GeneratorExit:
            if future.done() and isinstance(future.exception(), GeneratorExit):
                raise DHTCallLost("hivemind's DHT process dropped the call") from None
            raise  # this coroutine itself is being closed
        finally:
            if future.done():  # else this await was cancelled, and _stop waits for the answer
                self._dht_calls.discard(future)

    async def _announcer(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands as the event
            # is set (a publish just before close), so this loop would outlive close() by its 10 s wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.announce_interval_s):
                    await self._announce_now.wait()
            self._announce_now.clear()
            await self._find_reach()
            announcement = self._outbox.announcement()
            if announcement is None:
                continue
            try:
                stored = await self._dht_call(self._dht.store(
                    self._key,
                    subkey=self._owner,
                    value=encode_announcement(announcement),
                    expiration_time=get_dht_time() + self._config.announcement_ttl_s,
                    return_future=True,
                ))
                if not stored:
                    self._announce_failures += 1
                    logger.warning("announcement not stored (no DHT peer accepted it); retrying")
            except asyncio.CancelledError:
                raise
            except Exception as error:  # keep announcing: the next round may succeed
                self._announce_failures += 1
                logger.warning("announcement failed: %s: %s", type(error).__name__, error)

    async def _read_visible(self) -> list[str]:
        """This node's addresses as p2pd sees them now (``_IDENTIFY_TIMEOUT_S`` at most); kept as the last known."""
        maddrs = await asyncio.wait_for(self._p2p.get_visible_maddrs(latest=True), _IDENTIFY_TIMEOUT_S)
        self._visible = [str(maddr) for maddr in maddrs]
        return list(self._visible)

    async def _find_reach(self) -> None:
        """How peers reach this node now (``own_reach``), for the announcement; a change is logged."""
        counters = await asyncio.to_thread(read_counters, self._metrics_port)
        try:
            visible = await self._read_visible()
        except Exception as error:  # p2pd busy, slow or restarting: what was known stays (the announcement goes on)
            logger.debug("cannot read this node's addresses: %s: %s", type(error).__name__, error)
            return
        reach = own_reach(self._config, visible, counters)
        self._relay = counters if counters is not None else self._relay
        if reach != self._reach:
            _say_reach(reach, self._reach, self._config)
        self._reach = reach
        self._outbox.set_reach(reach)

    async def _poller(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a failed poll is retried next period, never fatal
                self._poll_failures += 1
                logger.warning("reading announcements failed: %s: %s", type(error).__name__, error)
            # The rest of the period, unless poll_now asks sooner (one asked for during the poll counts; the
            # gap keeps a node that keeps asking to a few reads a second).
            period = self._config.poll_interval_s
            await asyncio.sleep(max(0.0, min(_MIN_POLL_GAP_S, period) - (time.monotonic() - started)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, period - (time.monotonic() - started))):
                    await self._poll_soon.wait()
            self._poll_soon.clear()

    async def _poll_once(self) -> None:
        config = self._config
        future = read_shards(self._dht, config.run_id, config.shards, only=self._sampler.shards_to_read(),
                             beam_size=config.read_beam_size or None)
        values = await self._dht_call(future)
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
        self._members = {peer_id: member_of(announcement) for peer_id, announcement in remembered.items()}
        self._listed = {peer_id: frozenset(d.round for d in announcement.batches)
                        for peer_id, announcement in remembered.items()}
        self._circuits = {peer_id: announcement.reach.addrs for peer_id, announcement in remembered.items()}
        # one that says no one can dial it is not worth a fetch slot
        dialable = [a for a in remembered.values() if a.reach.how != "unreachable"]
        wanted = self._inbox.choose(dialable, config.fetch_budget, config.poll_interval_s, self._rng,
                                    config.fetch_horizon())
        for announcement, descriptor in wanted:
            task = asyncio.create_task(self._fetch(announcement.peer_id, descriptor))
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)

    async def _fetch(self, peer_id: str, descriptor: BatchDescriptor) -> None:
        attempt = 0
        while True:
            try:
                async with self._fetch_slots.hold(peer_id):  # not held while backing off
                    deadline, started = fetch_deadline(self._config, descriptor.bytes), time.monotonic()
                    data, relayed = await asyncio.wait_for(self._download(peer_id, descriptor), deadline)
                    lateness = 2 * (time.monotonic() - started) / deadline - 1  # > 0 in the deadline's second half
                batch = await asyncio.get_running_loop().run_in_executor(self._decoder, self._inbox.open, peer_id,
                                                                         descriptor, data)
            except Rejected as rejected:  # the peer answered, and the answer is final
                self._inbox.fail(peer_id, descriptor, rejected.reason)
                logger.info("refused batch %s of %s: %s", descriptor.round, peer_id, rejected)
                return
            except asyncio.CancelledError:
                self._inbox.fail(peer_id, descriptor, FETCH_FAILED)
                raise
            except Exception as error:  # timeouts, refused connections, streams closed early: maybe transient
                failure = f"{type(error).__name__}: {error}"
                if attempt < self._config.fetch_retries and self._still_offered(peer_id, descriptor):
                    delay = retry_delay(self._config.fetch_retry_backoff_s, attempt)
                    logger.info("fetching batch %s of %s failed (%s); retrying in %.1f s", descriptor.round, peer_id,
                                failure, delay)
                    attempt += 1
                    await asyncio.sleep(delay)
                    continue
                self._inbox.fail(peer_id, descriptor, FETCH_FAILED)
                logger.info("fetching batch %s of %s failed after %d attempts: %s", descriptor.round, peer_id,
                            attempt + 1, failure)
                return
            self._inbox.deliver(peer_id, descriptor, batch, len(data), lateness)
            self._relayed_received += len(data) if relayed else 0
            return

    async def _dial_circuits(self, peer_id: str) -> None:
        """Hand ``p2pd`` the circuit addresses to reach a relayed member at (``circuits.py``); no-op otherwise.
        A failure here is left to the stream call that follows, which then fails as a fetch does."""
        encoded = []
        for circuit in circuits_to_dial(self._circuits.get(peer_id, ()), self._own_relays, set(self._members)):
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

    async def _download(self, peer_id: str, descriptor: BatchDescriptor) -> tuple[bytes, bool]:
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
        via.append(_relayed(info))
        try:
            writer.write(descriptor.round.to_bytes(_HEADER, "big") + len(data).to_bytes(_HEADER, "big"))
            await writer.drain()
            answer = int.from_bytes(await reader.readexactly(_HEADER), "big")
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

    async def _serve(self, info: StreamInfo, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One fetch of one of our payloads, if a serving slot is free to the asker (``max_concurrent_serves``
        in all, two per peer), else the stream is closed at once and the asker tries again later. The payload
        is written in slices of the one copy the outbox keeps, each awaited, within the fetch deadline a
        fetcher of it gives itself: a client that never reads holds one slot for that long, never a copy."""
        peer = info.peer_id.to_base58()
        if not self._serve_slots.try_acquire(peer):
            self._serves_turned_away += 1
            writer.close()
            return
        try:
            request = await asyncio.wait_for(reader.readexactly(2 * _HEADER), _REQUEST_TIMEOUT_S)
            payload = self._outbox.payload(int.from_bytes(request[:_HEADER], "big")) or b""
            offset = min(int.from_bytes(request[_HEADER:], "big"), len(payload))
            async with asyncio.timeout(fetch_deadline(self._config, len(payload) - offset)):
                writer.write(len(payload).to_bytes(_HEADER, "big"))
                view = memoryview(payload)
                for start in range(offset, len(view), _WRITE_SLICE):
                    writer.write(view[start : start + _WRITE_SLICE])
                    await writer.drain()
                await writer.drain()
            self._relayed_sent += len(payload) - offset if _relayed(info) else 0
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as error:
            logger.debug("a fetch of ours ended early: %s", error)
        finally:
            writer.close()
            self._serve_slots.release(peer)


def _relayed(info: StreamInfo) -> bool:
    """Whether a stream runs over a relayed connection (its remote address is a circuit)."""
    return "/p2p-circuit" in str(info.addr)


def _say_reach(reach: Reach, before: Reach, config: SwarmConfig) -> None:
    """Log how peers reach this node, now that it changed; plainly when peers outside its network cannot."""
    if reach.how == "relayed":
        logger.info("peers reach this node through %s: %s", "a relay" if len(reach.relays) == 1 else
                    f"{len(reach.relays)} relays", ", ".join(reach.addrs))
    elif reach.how == "direct":
        logger.info("peers reach this node directly")
    elif reach.how == "private":
        lost = " (it lost its relay slot)" if before.how == "relayed" else ""
        relays = relays_of(config)
        logger.warning(
            "PEERS OUTSIDE THIS NODE'S NETWORK CANNOT FETCH ITS BATCHES: AutoNAT finds it unreachable from outside "
            "and no relay holds a slot for it%s; %s. It still trains on its peers' batches. Forward a port or name "
            "a relay (docs/nat.md).", lost,
            f"libp2p keeps asking its {len(relays)} relay{'s' if len(relays) != 1 else ''}" if relays
            else "it knows no relay ([swarm] relays, or an initial peer)")
