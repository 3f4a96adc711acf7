"""The real transport: signed announcements in a Hivemind DHT, payloads over libp2p streams.

Shape (docs/swarm.md): a peer stores one small signed announcement under its run's shard key and renews it
before it expires; every ``poll_interval_s`` it reads the shards its ``Sampler`` chooses and fetches the batches
its ``Inbox`` wants over a P2P stream from the peer that announced them; it serves its own to the peers that
fetch them. ``HivemindTransport`` starts a DHT peer and the loop its network work runs on, and puts together the
parts that do that work, one concern each:

- ``announce.py``  ``Announcer``: this node's signed record, stored again each period and after a publish,
                   and how peers reach this node (said in the record).
- ``fetch.py``     ``Fetcher``: the poller that reads the directory, and the fetches of peers' batches
                   (deadlines, retries, streams resumed after a relay's cut).
- ``serve.py``     ``Server``: this node's payloads to the peers that fetch them, in fair slots.
- ``stream.py``    the stream exchange between the last two.
- ``calls.py``     calls into the DHT process under a deadline; a lost one is an ordinary failure.

What it does with what arrives (the inbox: charges, counts, scores) is every transport's (``transport_base.py``);
its ``stats`` add the network's own counts: failed announcements and polls, serves turned away, and the payload
bytes fetched and served over a relayed connection (``TransportStats.relayed_*``).

Threads: all network work runs on one asyncio loop in a daemon thread that this object owns (the DHT's P2P
replica is bound to the loop that first uses it). ``publish``, ``receive``, ``members``, ``stats`` are called from
the training thread and never wait on the network. Fetched payloads are decoded on one more thread it owns
(``ftis-decode``). ``close`` stops the loop and the decoder and shuts the DHT and its ``p2pd`` down.

Time: batch ages and announcement times follow ``clock`` (the DHT's time by default; tests move it on instead of
sleeping); the DHT's record expirations always follow the DHT's own time.
"""

import asyncio
import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import hivemind
from hivemind.utils import get_dht_time

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.announce import Announcer, announce_settings
from ftis.node.swarm.dht.calls import DHTCalls
from ftis.node.swarm.dht.fetch import Fetcher, fetch_settings
from ftis.node.swarm.dht.records import record_validators, run_prefix, shard_key, shard_of
from ftis.node.swarm.dht.serve import Server
from ftis.node.swarm.dht.stream import fetch_deadline
from ftis.node.swarm.errors import SwarmError
from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import inbox_limits
from ftis.node.swarm.exchange.outbox import Outbox
from ftis.node.swarm.keys.identity import IdentityError, ensure_identity, signing_key
from ftis.node.swarm.peers.reputation import reputation_settings
from ftis.node.swarm.reach.listen_ports import check_listen_ports
from ftis.node.swarm.reach.p2pd_metrics import free_port
from ftis.node.swarm.reach.reachability import RelayAwareDHT, p2p_options, p2pd_flags, reach_settings
from ftis.node.swarm.transport import Member, TransportStats
from ftis.node.swarm.transport_base import TransportBase
from ftis.protocol import RolloutBatch
from ftis.protocol.announcement import BatchDescriptor


def start_dht(config: SwarmConfig, identity_path: Path, *, announce: bool,
              metrics_port: int | None = None) -> tuple[hivemind.DHT, bytes]:
    """A started DHT peer with this run's validators; returns it and the subkey it signs with. Its ``p2pd``
    serves libp2p's counters on loopback at ``metrics_port`` when given (``p2pd_metrics.py``).

    The identity file is created when missing; a new one is not checked for being in use (hivemind's
    check starts a throwaway daemon, which doubles start-up).
    """
    check_listen_ports(config.host_maddrs)  # a taken port said at once, before anything is written
    fresh = not identity_path.exists()
    try:
        identity_path = ensure_identity(identity_path)
        key = signing_key(identity_path) if announce else None
    except IdentityError as error:
        raise SwarmError(str(error)) from None
    validators = record_validators(config.run_id, config.shards, key)
    reach = reach_settings(config)
    try:
        dht = RelayAwareDHT(
            p2pd_flags=p2pd_flags(reach, metrics_port),
            initial_peers=list(config.initial_peers) or None,
            start=False,
            host_maddrs=list(config.host_maddrs),
            announce_maddrs=list(config.announce_maddrs) or None,
            identity_path=str(identity_path),
            check_if_identity_free=not fresh,
            client_mode=config.client_mode,
            record_validators=validators,
            startup_timeout=config.start_timeout_s,  # p2pd's own start: hivemind's default 15 s would cap it
            **p2p_options(reach),
        )
        dht.run_in_background(await_ready=True, timeout=config.start_timeout_s)
    except Exception as error:  # hivemind raises many types here (P2PDaemonError, TimeoutError, ValueError...)
        raise SwarmError(f"cannot join the swarm: {type(error).__name__}: {error}") from None
    return dht, validators[0].local_public_key


def peer_id_of(dht: hivemind.DHT, timeout: float) -> str:
    """The DHT peer's id (base58), asked of its process within ``timeout`` s (``dht.peer_id`` waits without a limit,
    and hivemind's process can lose a call: see ``calls.py``)."""
    return dht.run_coroutine(hivemind.DHT._get_peer_id, return_future=True).result(timeout).to_base58()


class HivemindTransport(TransportBase):
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
            peer_id = peer_id_of(self._dht, config.start_timeout_s)
        except Exception as error:
            self._dht.shutdown()
            raise SwarmError(f"cannot join the swarm: its DHT process did not say its peer id: "
                             f"{type(error).__name__}: {error}") from None
        super().__init__(peer_id,
                         Inbox(config.run_id, tokenizer, replace(inbox_limits(config), max_text_bytes=max_text_bytes),
                               clock=clock, reputation=reputation_settings(config)),
                         Outbox(config.run_id, peer_id, keep=config.keep_batches, clock=clock))
        self._key = shard_key(config.run_id, shard_of(peer_id, config.shards))
        self._handler = f"{run_prefix(config.run_id)}.batch"
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="ftis-decode")  # fetched payloads, one at a time
        self._dht_calls = DHTCalls()
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
    def visible_maddrs(self) -> list[str]:
        """Where peers reach this node now: behind a NAT, ``<relay>/p2p-circuit/p2p/<us>`` once a slot is held
        (``Announcer.visible_maddrs``: asked of p2pd within a time limit, else the addresses last read)."""
        self._check_open()
        return self._announcer.visible_maddrs()

    def publish(self, batch: RolloutBatch) -> BatchDescriptor:
        descriptor = super().publish(batch)
        self._loop.call_soon_threadsafe(self._announcer.announce_soon)
        return descriptor

    def poll_now(self) -> None:
        self._check_open()
        self._loop.call_soon_threadsafe(self._fetcher.poll_soon)

    def stats(self) -> TransportStats:
        stats = super().stats()
        stats.announce_failures, stats.relay = self._announcer.failures, self._announcer.relay
        stats.poll_failures, stats.relayed_received_bytes = self._fetcher.poll_failures, self._fetcher.relayed_received
        stats.serves_turned_away, stats.relayed_sent_bytes = self._server.turned_away, self._server.relayed_sent
        return stats

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

    def _peers(self) -> dict[str, Member]:
        return self._fetcher.members

    def _remove_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    # ---------------------------------------------------------------- the network thread's side

    async def _start(self) -> None:
        config = self._config
        self._p2p = await self._dht.replicate_p2p()
        self._announcer = Announcer(announce_settings(config), self._dht, self._p2p, self._key, self._owner,
                                    self._outbox, self._dht_calls, self._metrics_port, self._loop)
        self._fetcher = Fetcher(fetch_settings(config), self._dht, self._p2p, self._handler, self._peer_id, self._inbox,
                                self._dht_calls, self._decoder)
        self._server = Server(config.max_concurrent_serves, fetch_deadline(config), self._outbox)
        await self._p2p.add_binary_stream_handler(self._handler, self._server.serve)
        self._tasks = [asyncio.create_task(self._announcer.run()), asyncio.create_task(self._fetcher.run())]

    async def _stop(self) -> None:
        try:
            for task in [*self._tasks, *self._fetcher.fetches]:
                task.cancel()
            await asyncio.gather(*self._tasks, *self._fetcher.fetches, return_exceptions=True)
            await self._dht_calls.settle()  # what the cancelled tasks were awaiting still gets its answer
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
