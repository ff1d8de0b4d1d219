"""Broker-side recompression for topics whose ``compression.type`` names a codec.

Kafka's LogValidator rewrites a batch whose codec differs from the topic's.  Compression covers
only the records section of a v2 batch, so the records are never parsed: the section is
decompressed, compressed with the topic's codec, and a new header (same base offset, timestamps,
producer id/epoch/sequence, offset span and record count; new length, codec bits and CRC) is
put in front.  Control batches are never compressed and stay as they are.
"""

from __future__ import annotations

from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    BatchHeader,
    iter_batch_headers,
    rewrite_crc,
)
from pybroker.records.compression import CompressionType, compress, decompress


def needs_recompression(batches: list[BatchHeader], codec: int) -> bool:
    return any(b.compression != codec and not b.is_control for b in batches)


def recompress_batches(
    buf: bytes | bytearray | memoryview, batches: list[BatchHeader], codec: int, level: int | None = None
) -> tuple[bytearray, list[BatchHeader]]:
    """The batches of ``buf`` with every data batch in ``codec``; returns the new buffer and its
    headers (positions in the new buffer).  Raises CorruptRecordError for undecodable input."""
    view = memoryview(buf)
    out = bytearray()
    for header in batches:
        batch = view[header.position : header.end_position]
        if header.compression == codec or header.is_control:
            out += batch
            continue
        records = decompress(header.compression, batch[RECORDS_OFFSET:])
        # snappy in xerial framing: what the Java client writes and every client reads.
        payload = (
            compress(codec, records, xerial=True, level=level) if codec != CompressionType.NONE else records
        )
        start = len(out)
        out += batch[:RECORDS_OFFSET]
        out += payload
        length = len(out) - start - LOG_OVERHEAD
        out[start + LENGTH_OFFSET : start + LENGTH_OFFSET + 4] = length.to_bytes(4, "big", signed=True)
        attributes = int.from_bytes(out[start + ATTRIBUTES_OFFSET : start + ATTRIBUTES_OFFSET + 2], "big")
        attributes = (attributes & ~COMPRESSION_MASK) | codec
        out[start + ATTRIBUTES_OFFSET : start + ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big")
        rewrite_crc(out, start)
    return out, list(iter_batch_headers(out, verify_crc=False))
