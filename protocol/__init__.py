"""ftis.protocol: the wire format nodes exchange rollouts in (docs/protocol.md). Imports neither torch
nor hivemind, so a dashboard or another implementation can use it alone.

Files:
- ``schema.py``   the decoded form: ``RolloutBatch`` → ``Group`` → ``Completion``, and their parts.
- ``decode.py``   ``decode``, strict and total, and the wire layout of a batch (v1 to v3); ``read``, the same checks
                  with the columns left compressed and what inflating them takes known.
- ``encode.py``   ``encode``, which validates by decoding what it produced.
- ``columns.py``  the compressed token column: packed ids and quantised sampler log-probs, one zstd frame; the
                  format's one zstd code path.
- ``texts.py``    the text column (v3, optional): each completion's text, UTF-8, bounded per token, one zstd frame.
- ``announcement.py``  what a peer lists in the DHT about itself and its recent batches.
- ``envelope.py`` a message's envelope: its msgpack bounded from the headers (depth, values, lengths) before any object
                  is built, then unpacked; its version and kind read. Batches and announcements alike.
- ``reader.py``   typed, strict access to decoded msgpack maps, naming each field's path.
- ``limits.py``   every limit and constant of the format, named.
- ``errors.py``   ``ProtocolError`` and its two kinds, ``DecodeError`` and ``EncodeError``; ``UserError``, the base of
                  every error a user or a peer can cause (``DecodeError`` is one).
- ``summary.py``  a printable summary of a batch (used by ``ftis-node inspect``).
"""

from ftis.protocol.decode import CompressedBatch, decode, read
from ftis.protocol.encode import encode
from ftis.protocol.errors import DecodeError, EncodeError, ProtocolError, UserError
from ftis.protocol.limits import PROTOCOL_VERSION
from ftis.protocol.schema import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
)

__all__ = [
    "PROTOCOL_VERSION",
    "Completion",
    "CompressedBatch",
    "DecodeError",
    "EncodeError",
    "Group",
    "PolicyInfo",
    "ProtocolError",
    "RolloutBatch",
    "SamplingSettings",
    "TaskRef",
    "TokenizerInfo",
    "UserError",
    "decode",
    "encode",
    "read",
]
