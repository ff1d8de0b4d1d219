"""Effective per-log settings, named after Kafka's topic configs in snake_case."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.records.compression import CODECS_BY_NAME

_NEVER = 2**63 - 1


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    message_timestamp_before_max_ms: int = _NEVER
    message_timestamp_after_max_ms: int = 3_600_000  # Kafka 4's default: one hour
    cleanup_policy: str = "delete"
    flush_messages: int = _NEVER
    flush_ms: int = _NEVER
    file_delete_delay_ms: int = 60000
    compression_type: str = "producer"  # or a codec name the broker recompresses batches to
    compression_level: int | None = None

    @property
    def target_codec(self) -> int | None:
        """The codec id every data batch is stored in, or None to keep the producer's."""
        if self.compression_type == "producer":
            return None
        return CODECS_BY_NAME[self.compression_type]

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def is_compacted(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def deletes_by_retention(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def max_offset_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 8)

    @property
    def max_time_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 12)
