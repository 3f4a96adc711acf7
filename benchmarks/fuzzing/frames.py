"""Compressed frames a hostile peer sends: small on the wire, as large as the protocol allows once inflated."""

import functools

import zstandard


@functools.lru_cache(maxsize=8)
def repeated_frame(byte: bytes, size: int, chunk: int = 1 << 20) -> bytes:
    """One zstd frame of ``byte`` × ``size`` (content size and checksum declared, as the format wants), compressed a
    chunk at a time: never ``size`` bytes in memory."""
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True).compressobj(size=size)
    block, parts = byte * chunk, []
    for start in range(0, size, chunk):
        parts.append(compressor.compress(block[: min(chunk, size - start)]))
    parts.append(compressor.flush())
    return b"".join(parts)
