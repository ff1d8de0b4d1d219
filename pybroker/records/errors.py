"""Errors raised while parsing record batches."""


class RecordFormatError(Exception):
    """Base class for malformed record data."""


class CorruptRecordError(RecordFormatError):
    """Bad CRC, truncated batch or impossible length (Kafka: CORRUPT_MESSAGE)."""


class InvalidRecordError(RecordFormatError):
    """Well-formed bytes that break a rule: old magic, bad counts (Kafka: INVALID_RECORD)."""


class UnsupportedCompressionError(RecordFormatError):
    """Compression codec id outside 0..4 (Kafka: UNSUPPORTED_COMPRESSION_TYPE)."""


class RecordBatchTooLargeError(RecordFormatError):
    """A batch exceeds max.message.bytes once rewritten (recompressed) (Kafka: MESSAGE_TOO_LARGE)."""


class DecompressedSizeLimitError(RecordFormatError):
    """A records section expands beyond the limit the broker sets for it; Kafka fails such a batch with
    a server error (UNKNOWN_SERVER_ERROR)."""
