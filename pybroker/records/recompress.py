"""Broker-side recompression for topics whose ``compression.type`` names a codec.

Kafka's LogValidator rewrites a batch whose codec differs from the topic's.  Compression covers
only the records section of a v2 batch, so the records are never parsed here: the section is
streamed through a decompressor into a compressor in bounded chunks (``streams``), and a new header
(same base offset, timestamps, producer id/epoch/sequence, offset span and record count; new length,
codec bits and CRC) is put in front.  Control batches are never compressed and stay as they are.

Produce recompresses while it validates (records.validator), in a worker thread; this is the same
rewrite for batches appended by other paths, with the same bounds.
"""

from __future__ import annotations

from pybroker.records.batch import (
    RECORDS_OFFSET,
    BatchHeader,
    iter_batch_headers,
    replace_records_section,
)
from pybroker.records.streams import recompress_bounded
from pybroker.records.validator import RECOMPRESSION_EXPANSION

# Kafka's default max.message.bytes, for callers that do not say.
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def needs_recompression(batches: list[BatchHeader], codec: int) -> bool:
    return any(b.compression != codec and not b.is_control for b in batches)


def recompress_batches(
    buf: bytes | bytearray | memoryview,
    batches: list[BatchHeader],
    codec: int,
    level: int | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> tuple[bytearray, list[BatchHeader]]:
    """The batches of ``buf`` with every data batch in ``codec``; returns the new buffer and its
    headers (positions in the new buffer).  Raises RecordDecompressionError for undecodable input,
    DecompressedSizeLimitError past RECOMPRESSION_EXPANSION x ``max_message_bytes`` of records and
    RecordBatchTooLargeError when a recompressed batch would exceed ``max_message_bytes``."""
    view = memoryview(buf)
    out = bytearray()
    limit = RECOMPRESSION_EXPANSION * max(max_message_bytes, 1)
    for header in batches:
        batch = view[header.position : header.end_position]
        if header.compression == codec or header.is_control:
            out += batch
            continue
        payload = recompress_bounded(
            header.compression, batch[RECORDS_OFFSET:], codec, level, limit, max_message_bytes
        )
        out += replace_records_section(batch, payload, codec)
    return out, list(iter_batch_headers(out, verify_crc=False))
