"""Kafka's controller limits on one admin request (ReplicationControlManager / QuorumController)."""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.protocol.errors import ErrorCode, KafkaError

# Kafka's controller refuses a request that creates more partitions than this
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH) or that would write more metadata records
# than this (QuorumController.MAX_RECORDS_PER_USER_OP); both are POLICY_VIOLATION for the whole request.
MAX_PARTITIONS_PER_BATCH = 10_000
MAX_RECORDS_PER_USER_OP = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."


def new_topic_records(num_partitions: int, configs: Mapping[str, str | None]) -> int:
    """The metadata records Kafka's controller writes to create a topic: a TopicRecord, a
    ConfigRecord per config set, a PartitionRecord per partition."""
    return 1 + sum(1 for value in configs.values() if value is not None) + num_partitions


def check_creation_limits(partitions: int, records: int) -> None:
    """Kafka's controller limits for one request creating ``partitions`` partitions with
    ``records`` metadata records; raises POLICY_VIOLATION, which applies to the whole request."""
    if partitions > MAX_PARTITIONS_PER_BATCH:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)
    if records > MAX_RECORDS_PER_USER_OP:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)
