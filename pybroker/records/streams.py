"""Streaming codecs for a batch's records section: decompress and compress in bounded chunks.

A compressed batch of a few KiB can hold gigabytes (zeros compress 30,000:1 under zstd), so the
broker never decompresses a records section in one call: a reader hands out at most ``n`` bytes at a
time, and a writer compresses chunk by chunk.  Memory is then the chunk size plus the codec's own
state (for zstd, its window: capped below).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

from pybroker.records.compression import XERIAL_MAGIC, CompressionType
from pybroker.records.errors import (
    DecompressedSizeLimitError,
    RecordBatchTooLargeError,
    RecordFormatError,
    UnsupportedCompressionError,
)

# Compressed input is fed to a codec this much at a time (the decompressor copies what it has not
# consumed on every call, so a small slice keeps that copy cheap).
_INPUT_SLICE = 16 * 1024
# The largest zstd window a frame may ask for (the decoder allocates and fills it: a crafted 33 KB
# frame with a 128 MiB window and a gigabyte of zeros costs 128 MiB of RSS).  Kafka's reader accepts
# zstd-jni's default, 2^27; 2^25 accepts every frame the Java producer writes up to
# compression.zstd.level 20 (zstd's window log for unknown-size input: 21 at the default level 3, 23
# at 19, 25 at 20; 26-27 only at levels 21-22), librdkafka's (it knows the input size, so its window
# stays near the batch size) and Go clients', while two concurrent walks hold at most 64 MiB of
# windows.  A larger window is refused like any undecodable payload (Kafka: UNKNOWN_SERVER_ERROR).
ZSTD_MAX_WINDOW = 1 << 25
# Raw snappy emits at most 64 bytes per 3-byte copy op: no valid block expands more than ~22 times.
_SNAPPY_MAX_RATIO = 22
_XERIAL_HEADER_SIZE = 16
_INT32 = struct.Struct(">i")
_XERIAL_BLOCK_SIZE = 32 * 1024


class RecordDecompressionError(RecordFormatError):
    """The compressed records section cannot be decompressed.  Kafka's reader raises a KafkaException
    ("Failed to decompress record stream"), answered as UNKNOWN_SERVER_ERROR."""


Reader = Callable[[int], bytes]


def open_reader(codec: int, payload: memoryview) -> Reader:
    """A ``read(n)`` over the decompressed records section: at most ``n`` bytes, b"" at the end."""
    if codec == CompressionType.GZIP:
        return _ZlibReader(payload).read
    if codec == CompressionType.ZSTD:
        return _zstd_reader(payload)
    if codec == CompressionType.LZ4:
        return _Lz4Reader(payload).read
    if codec == CompressionType.SNAPPY:
        return _SnappyReader(payload).read
    if codec == CompressionType.NONE:
        return _PlainReader(payload).read
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


class _PlainReader:
    def __init__(self, payload: memoryview) -> None:
        self.view = payload
        self.position = 0

    def read(self, n: int) -> bytes:
        chunk = bytes(self.view[self.position : self.position + n])
        self.position += len(chunk)
        return chunk


class _ZlibReader:
    """gzip, members read one after the other as Java's GZIPInputStream does."""

    def __init__(self, payload: memoryview) -> None:
        self.view = payload
        self.position = 0
        self.decompressor = zlib.decompressobj(wbits=31)
        self.pending: bytes | memoryview = b""

    def read(self, n: int) -> bytes:
        try:
            while True:
                d = self.decompressor
                if d.eof:
                    # Another gzip member may follow (Java's GZIPInputStream reads them all); any other
                    # trailing bytes end the stream, as there.
                    rest = d.unused_data
                    head = (rest + bytes(self.view[self.position : self.position + 2]))[:2]
                    if head != b"\x1f\x8b":
                        return b""
                    self.decompressor = zlib.decompressobj(wbits=31)
                    self.pending = rest
                    continue
                if not self.pending:
                    if self.position >= len(self.view):
                        raise RecordDecompressionError("gzip records end before their stream does")
                    self.pending = self.view[self.position : self.position + _INPUT_SLICE]
                    self.position += len(self.pending)
                out = d.decompress(self.pending, n)
                self.pending = d.unconsumed_tail
                if out:
                    return out
        except zlib.error as exc:
            raise RecordDecompressionError(f"cannot decompress GZIP records: {exc}") from exc


def _zstd_reader(payload: memoryview) -> Reader:
    stream = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
        bytes(payload), read_across_frames=True, read_size=_INPUT_SLICE
    )

    def read(n: int) -> bytes:
        try:
            return stream.read(n)
        except zstandard.ZstdError as exc:
            raise RecordDecompressionError(f"cannot decompress ZSTD records: {exc}") from exc

    return read


class _Lz4Reader:
    def __init__(self, payload: memoryview) -> None:
        self.view = payload
        self.position = 0
        self.decompressor = lz4.frame.LZ4FrameDecompressor()

    def read(self, n: int) -> bytes:
        d = self.decompressor
        try:
            while not d.eof:
                if d.needs_input:
                    if self.position >= len(self.view):
                        raise RecordDecompressionError("lz4 records end before their frame does")
                    data = bytes(self.view[self.position : self.position + _INPUT_SLICE])
                    self.position += len(data)
                else:
                    data = b""
                out = d.decompress(data, max_length=n)
                if out:
                    return out
        except RuntimeError as exc:  # lz4.frame's error type for a bad frame
            raise RecordDecompressionError(f"cannot decompress LZ4 records: {exc}") from exc
        return b""


class _SnappyReader:
    """Raw snappy (one block) or the Java client's xerial framing (blocks of ~32 KiB).  A block is
    decompressed whole: its size is checked first against what snappy can possibly expand to."""

    def __init__(self, payload: memoryview) -> None:
        self.view = payload
        self.xerial = bytes(payload[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC
        self.position = _XERIAL_HEADER_SIZE if self.xerial else 0
        self.block = memoryview(b"")
        self.done = False

    def _next_block(self) -> memoryview | None:
        view = self.view
        if self.xerial:
            if self.position >= len(view):
                return None
            if self.position + 4 > len(view):
                raise RecordDecompressionError("truncated xerial snappy block length")
            (length,) = _INT32.unpack_from(view, self.position)
            self.position += 4
            if length < 0 or self.position + length > len(view):
                raise RecordDecompressionError("xerial snappy block runs past the end of the records")
            raw = view[self.position : self.position + length]
            self.position += length
        else:
            if self.done:
                return None
            self.done = True
            raw = view
        try:
            size = cramjam.snappy.decompress_raw_len(raw)
            if size > _SNAPPY_MAX_RATIO * len(raw) + 64:
                raise RecordDecompressionError(f"snappy block of {len(raw)} bytes claims {size} bytes")
            return memoryview(bytes(cramjam.snappy.decompress_raw(raw)))
        except cramjam.DecompressionError as exc:
            raise RecordDecompressionError(f"cannot decompress SNAPPY records: {exc}") from exc

    def read(self, n: int) -> bytes:
        while not self.block:
            block = self._next_block()
            if block is None:
                return b""
            self.block = block
        out = bytes(self.block[:n])
        self.block = self.block[n:]
        return out


class StreamCompressor:
    """Compress a records section chunk by chunk in a Kafka codec; ``output_size`` is what it has
    produced so far, so a caller can stop as soon as the result would be too large."""

    def __init__(self, codec: int, level: int | None = None) -> None:
        self.codec = codec
        self.parts: list[bytes] = []
        self.output_size = 0
        self._snappy_pending = bytearray()
        # zlib's and cramjam's compressors differ (flush vs finish): one attribute each.
        self._gzip: zlib._Compress | None = None
        self._cramjam: cramjam.zstd.Compressor | cramjam.lz4.Compressor | None = None
        if codec == CompressionType.GZIP:
            self._gzip = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        elif codec == CompressionType.ZSTD:
            self._cramjam = cramjam.zstd.Compressor(level)
        elif codec == CompressionType.LZ4:
            self._cramjam = cramjam.lz4.Compressor(level)
        elif codec == CompressionType.SNAPPY:
            # The Java client's framing, which every client reads.
            self._emit(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        elif codec != CompressionType.NONE:
            raise UnsupportedCompressionError(f"unknown compression codec {codec}")

    def _emit(self, data: bytes) -> None:
        if data:
            self.parts.append(data)
            self.output_size += len(data)

    def _snappy_blocks(self, final: bool) -> None:
        pending = self._snappy_pending
        while len(pending) >= _XERIAL_BLOCK_SIZE or (final and pending):
            block = bytes(cramjam.snappy.compress_raw(bytes(pending[:_XERIAL_BLOCK_SIZE])))
            del pending[:_XERIAL_BLOCK_SIZE]
            self._emit(_INT32.pack(len(block)) + block)

    def write(self, data: bytes) -> None:
        if self._gzip is not None:
            self._emit(self._gzip.compress(data))
        elif self._cramjam is not None:
            self._cramjam.compress(data)
            self._emit(bytes(self._cramjam.flush()))
        elif self.codec == CompressionType.SNAPPY:
            self._snappy_pending += data
            self._snappy_blocks(final=False)
        else:  # NONE
            self._emit(bytes(data))

    def finish(self) -> bytes:
        if self._gzip is not None:
            self._emit(self._gzip.flush())
        elif self._cramjam is not None:
            self._emit(bytes(self._cramjam.finish()))
        elif self.codec == CompressionType.SNAPPY:
            self._snappy_blocks(final=True)
        return b"".join(self.parts)


_READ_CHUNK = 64 * 1024


def decompress_bounded(codec: int, payload: memoryview | bytes, limit: int) -> bytes:
    """The whole decompressed records section, refused (DecompressedSizeLimitError) as soon as it
    passes ``limit`` bytes: never more than ``limit`` plus one chunk is held."""
    read = open_reader(codec, memoryview(payload))
    parts = []
    total = 0
    while chunk := read(_READ_CHUNK):
        total += len(chunk)
        if total > limit:
            raise DecompressedSizeLimitError(f"records expand beyond {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def recompress_bounded(
    codec: int, payload: memoryview | bytes, target: int, level: int | None, limit: int, max_output: int
) -> bytes:
    """``payload`` (a records section in ``codec``) recompressed in ``target``, chunk by chunk: at most
    ``limit`` decompressed bytes are read, and the output may not pass ``max_output`` bytes."""
    read = open_reader(codec, memoryview(payload))
    compressor = StreamCompressor(target, level)
    total = 0
    while chunk := read(_READ_CHUNK):
        total += len(chunk)
        if total > limit:
            raise DecompressedSizeLimitError(f"records expand beyond {limit} bytes")
        compressor.write(chunk)
        if compressor.output_size > max_output:
            raise RecordBatchTooLargeError(f"recompressed batch exceeds {max_output} bytes")
    return compressor.finish()
