"""Codecs for the records section of a batch: gzip, snappy (raw and xerial), lz4 (frame), zstd."""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from pybroker.records.errors import CorruptRecordError, UnsupportedCompressionError


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# The Java client's SnappyOutputStream (xerial snappy-java) writes this header, then blocks of
# [int32 compressed length][raw snappy block].
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_MIN_COMPATIBLE = 1
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


# Kafka's topic config names of the codecs (compression.type), by codec id.
CODEC_NAMES = {
    CompressionType.NONE: "uncompressed",
    CompressionType.GZIP: "gzip",
    CompressionType.SNAPPY: "snappy",
    CompressionType.LZ4: "lz4",
    CompressionType.ZSTD: "zstd",
}
CODECS_BY_NAME = {name: codec for codec, name in CODEC_NAMES.items()}


def compress(
    codec: int, data: bytes | bytearray | memoryview, *, xerial: bool = False, level: int | None = None
) -> bytes:
    """Compress `data` with a Kafka codec id. `xerial` picks the Java client's snappy framing;
    `level` is the codec's level (None: the library's default; snappy has none)."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data) if xerial else bytes(cramjam.snappy.compress_raw(data))
    if codec == CompressionType.LZ4:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress a records section; snappy input may be raw or xerial-framed (detected by magic)."""
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CompressionType.SNAPPY:
            if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CompressionType.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"cannot decompress {CompressionType(codec).name} records: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_MIN_COMPATIBLE)]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    position = _XERIAL_HEADER.size
    out = []
    while position < len(view):
        if position + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block length")
        (block_length,) = _INT32.unpack_from(view, position)
        position += 4
        if block_length < 0 or position + block_length > len(view):
            raise CorruptRecordError("xerial snappy block runs past the end of the data")
        out.append(bytes(cramjam.snappy.decompress_raw(view[position : position + block_length])))
        position += block_length
    return b"".join(out)
