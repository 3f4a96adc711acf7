"""A hostile member of a real swarm, for the hivemind tests: it says and serves whatever a test scripts.

It is a real ``HivemindTransport`` (its own DHT peer, its signed announcement subkey, the run's stream
handler name) whose announcer and poller are stopped and whose stream handler is replaced, so the
outbox's own checks are bypassed: a test publishes any payload bytes under a validly signed
announcement (``publish``), with any descriptor fields (counts, sizes, rounds, creation
times), stores any announcement record at all (``store``, ``forged_record``), replays another peer's
payload as its own, floods the DHT with announcements, and answers each fetch as a ``Behaviour``
scripts it (honestly, tampered, stalled, over-long...). ``requests`` says who asked for what, when.

Every announcement is signed with the peer's own key, so the DHT accepts it: whatever is refused is
refused by the honest readers, which is what the tests check.
"""

import asyncio
import contextlib
import hashlib
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import msgpack
import numpy as np
from hivemind.utils import get_dht_time

from benchmarks.fuzzing.frames import repeated_frame
from ftis.protocol import (
    Completion,
    DecodeError,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    encode,
    read,
)
from ftis.protocol.announcement import Announcement, BatchDescriptor, encode_announcement
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES, MAX_TEXT_BYTES_PER_TOKEN, MAX_TEXT_SLACK_BYTES
from helpers.hivemind_swarm import DEADLINE_S, BatchBuilder, Peer
from helpers.swarm import make_batch

# (fetcher's peer id, reader, writer, the payload published under the requested round): answers one request
Behaviour = Callable[[str, asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]
_HEADER = 8  # bytes of a round or a length on the stream (swarm/dht/stream.py)


async def until_hung_up(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(reader.read(), 60)


async def serves(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> None:
    """What an honest peer does: the length, then the bytes."""
    writer.write(len(payload).to_bytes(_HEADER, "big") + payload)
    await writer.drain()


async def hangs_up(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> None:
    """Closes the stream without an answer: a dropped connection (the caller closes the writer)."""


async def stalls(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> None:
    """Accepts the fetch and never answers, holding the stream open until the fetcher hangs up."""
    await until_hung_up(reader)


async def tampered(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> None:
    """The announced length, other bytes."""
    writer.write(len(payload).to_bytes(_HEADER, "big") + payload[:-1] + bytes([payload[-1] ^ 0xFF]))
    await writer.drain()


async def claims_a_terabyte(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            payload: bytes) -> None:
    """A length far above the announced size, then nothing: a fetcher that read on would wait forever."""
    writer.write((1 << 40).to_bytes(_HEADER, "big"))
    await writer.drain()
    await until_hung_up(reader)


async def stalls_mid_payload(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             payload: bytes) -> None:
    """Half the payload, then silence: a peer that died while serving, without closing the stream."""
    writer.write(len(payload).to_bytes(_HEADER, "big") + payload[: len(payload) // 2])
    await writer.drain()
    await until_hung_up(reader)


def pushes(total: int, sent: list[int], chunk: int = 1 << 18) -> Behaviour:
    """Announces ``total`` bytes and pushes them in ``chunk``s for as long as the stream takes them,
    appending to ``sent`` the bytes it managed to write (the fetcher may hang up at any point)."""

    async def behaviour(_fetcher: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        payload: bytes) -> None:
        written = 0
        with contextlib.suppress(Exception):
            writer.write(total.to_bytes(_HEADER, "big"))
            await writer.drain()
            block = bytes(chunk)
            while written < total:
                writer.write(block)
                await asyncio.wait_for(writer.drain(), 10)
                written += chunk
        sent.append(written)

    return behaviour


def text_bomb(peer_id: str, run_id: str, round_: int, created_at: float, tokenizer: str, *, completions: int = 512,
              tokens: int = 16_383, vocab_size: int = 151_936) -> bytes:
    """A v3 batch within every limit the decoder checks before inflating, built without ever holding it inflated:
    one group of ``completions`` completions of ``tokens`` tokens each, every id 0 and every log-prob 0, each text
    one character repeated up to the protocol's bound (64 bytes a token + 256). At the defaults it is ~26 KB on
    the wire and inflates to ~570 MB of text and ~67 MB of columns."""
    template = RolloutBatch(run_id, peer_id, round_, created_at, PolicyInfo("bomb", "", "full", 0),
                            TokenizerInfo(tokenizer, vocab_size), SamplingSettings(1.0, 1.0, 0, tokens),
                            (Group("bomb", TaskRef("digits", "train", 0, "0"), np.array([1]),
                                   (Completion(np.array([0]), np.array([0.0]), 0.0, "length", "a"),)),))
    message = msgpack.unpackb(encode(template), raw=False)
    body = message["body"]
    body["groups"]["size"] = np.array([completions], "<u4").tobytes()
    body["completions"] = {"length": np.full(completions, tokens, "<u4").tobytes(),
                           "reward": np.zeros(completions, "<f8").tobytes(),
                           "finish_reason": np.full(completions, 1, "u1").tobytes()}
    num_ids, num_logprobs = 1 + completions * tokens, completions * tokens
    width = body["tokens"]["id_width"]
    body["tokens"]["logprob_width"] = 1
    body["tokens"]["data"] = repeated_frame(b"\0", num_ids * width + num_logprobs)
    text_bytes = MAX_TEXT_BYTES_PER_TOKEN * tokens + MAX_TEXT_SLACK_BYTES
    body["texts"] = {"length": np.full(completions, text_bytes, "<u4").tobytes(),
                     "data": repeated_frame(b"a", completions * text_bytes)}
    return msgpack.packb(message, use_bin_type=True)


def forged_record(announcement: Announcement, change: Callable[[dict[str, Any]], None]) -> bytes:
    """The wire bytes of ``announcement`` with its body changed by ``change`` (a dict of msgpack values,
    edited in place): anything at all, past every limit ``encode_announcement`` would enforce."""
    message = msgpack.unpackb(encode_announcement(announcement), raw=False)
    change(message["body"])
    return msgpack.packb(message, use_bin_type=True)


class HostilePeer:
    def __init__(self, peer: Peer, tokenizer: str):
        transport = peer.transport
        self.peer, self.peer_id, self.run_id, self.tokenizer = peer, peer.peer_id, peer.run_id, tokenizer
        self._transport = transport
        self._ttl = transport._config.announcement_ttl_s
        self.listed: OrderedDict[int, BatchDescriptor] = OrderedDict()  # round -> what the announcements say
        self.payloads: dict[int, bytes] = {}
        self.behaviours: dict[int, Behaviour] = {}
        self.requests: dict[tuple[str, int], list[float]] = {}  # (fetcher, round) -> time.monotonic() of each
        self.next_round = 0
        self.stores = 0  # announcement records the DHT accepted
        self._expires = 0.0
        asyncio.run_coroutine_threadsafe(self._take_over(), transport._loop).result(10)

    async def _take_over(self) -> None:
        transport = self._transport
        for task in transport._tasks:  # its announcer and poller: this peer says only what a test says
            task.cancel()
        await asyncio.gather(*transport._tasks, return_exceptions=True)
        await transport._p2p.remove_binary_stream_handler(transport._handler)
        await transport._p2p.add_binary_stream_handler(transport._handler, self._serve)

    # ------------------------------------------------------------------ what it says

    def describe(self, data: bytes, **changes: object) -> BatchDescriptor:
        """A descriptor of ``data`` under the next round: its true counts when it decodes, then
        ``changes`` (any field, any value)."""
        try:  # read, not inflated: a payload may be a bomb
            batch = read(data)
            counts = dict(groups=len(batch.layout.group_ids), tokens=batch.layout.num_logprobs,
                          policy_version=batch.header.policy.policy_version, created_at=batch.header.created_at)
        except DecodeError:
            counts = dict(groups=1, tokens=1, policy_version=0, created_at=get_dht_time())
        descriptor = BatchDescriptor(round=self.next_round, bytes=len(data), sha256=hashlib.sha256(data).digest(),
                                     **counts)
        return replace(descriptor, **changes)

    def publish(self, data: bytes, behaviour: Behaviour = serves, **changes: object) -> BatchDescriptor:
        """List ``data`` in a new signed announcement (``describe(data, **changes)``) and serve it with
        ``behaviour``; returns the descriptor announced."""
        descriptor = self.describe(data, **changes)
        self.listed[descriptor.round] = descriptor
        self.listed.move_to_end(descriptor.round)
        self.payloads[descriptor.round], self.behaviours[descriptor.round] = data, behaviour
        self.next_round = max(self.next_round, descriptor.round + 1)
        self.store(encode_announcement(self.announcement()))
        return descriptor

    def offer(self, behaviour: Behaviour = serves, build: BatchBuilder = make_batch) -> int:
        """Publish a valid batch of this peer, served by ``behaviour``; returns its round."""
        batch = build(self.peer_id, self.next_round, get_dht_time(), run_id=self.run_id)
        return self.publish(encode(batch), behaviour).round

    def announcement(self, **changes: object) -> Announcement:
        """What an honest peer would announce for the newest listed batches, then ``changes``."""
        batches = tuple(self.listed.values())[-MAX_ANNOUNCED_BATCHES:]
        announcement = Announcement(
            run_id=self.run_id, peer_id=self.peer_id, model="hostile-model", adapter="full",
            tokenizer=self.tokenizer, policy_version=0, published_batches=len(self.listed),
            published_tokens=sum(d.tokens for d in batches), updated_at=get_dht_time(), batches=batches)
        return replace(announcement, **changes)

    def store(self, record: bytes, deadline_s: float = DEADLINE_S) -> None:
        """Store ``record`` as this peer's announcement, signed with its key (a store can time out on a
        loaded machine: it is tried again, each time with a later expiration, as updates must be)."""
        give_up = time.monotonic() + deadline_s
        while True:
            self._expires = max(get_dht_time() + self._ttl, self._expires + 1e-3)
            if self._transport._dht.store(self._transport._key, record, expiration_time=self._expires,
                                          subkey=self._transport._owner):
                self.stores += 1
                return
            assert time.monotonic() < give_up, "no DHT peer accepted the hostile peer's signed record"

    def flood(self, record: Callable[[], bytes], seconds: float, in_flight: int = 8) -> tuple[int, int]:
        """Store ``record()`` again and again for ``seconds``, ``in_flight`` stores at a time (each with a
        later expiration, so each is an update); returns (records stored, records the DHT accepted)."""
        pending: deque = deque()
        stored = accepted = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end or pending:
            while time.monotonic() < end and len(pending) < in_flight:
                self._expires = max(get_dht_time() + self._ttl, self._expires + 1e-3)
                pending.append(self._transport._dht.store(self._transport._key, record(), subkey=self._transport._owner,
                                                          expiration_time=self._expires, return_future=True))
                stored += 1
            accepted += bool(pending.popleft().result())
        self.stores += accepted
        return stored, accepted

    # ------------------------------------------------------------------ what it serves

    def asked(self, fetcher: str, round_: int) -> list[float]:
        """When ``fetcher`` asked for the batch of round ``round_`` (a copy: this peer's loop appends to the
        original)."""
        return list(self.requests.get((fetcher, round_), []))

    def askers(self, round_: int) -> set[str]:
        return {fetcher for fetcher, asked in list(self.requests) if asked == round_}

    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            round_ = int.from_bytes(await reader.readexactly(_HEADER), "big")
            fetcher = info.peer_id.to_base58()
            self.requests.setdefault((fetcher, round_), []).append(time.monotonic())
            await self.behaviours.get(round_, serves)(fetcher, reader, writer, self.payloads.get(round_, b""))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
