"""RecordBatch v2 format: header parse, CRC-32C, offset stamping, compression, build/read records."""

from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_batch_headers,
    parse_batch_header,
    stamp_base_offset,
    stamp_log_append_time,
    stamp_partition_leader_epoch,
    validate_produce_batches,
)
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.compression import CompressionType, compress, decompress
from pybroker.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordFormatError,
    UnsupportedCompressionError,
)
from pybroker.records.reader import Record, decode_batch_records, read_records

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "CompressionType",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordFormatError",
    "SimpleRecord",
    "UnsupportedCompressionError",
    "build_batch",
    "compress",
    "decode_batch_records",
    "decompress",
    "iter_batch_headers",
    "parse_batch_header",
    "read_records",
    "stamp_base_offset",
    "stamp_log_append_time",
    "stamp_partition_leader_epoch",
    "validate_produce_batches",
]
