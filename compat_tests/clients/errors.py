"""Kafka protocol error codes the scenarios look for, by the names the protocol gives them.

Each library names errors its own way (librdkafka ``MSG_SIZE_TOO_LARGE``, kafka-python
``MessageSizeTooLargeError``, Java ``RecordTooLargeException``); adapters translate to these names
so a scenario can assert one thing for every client.
"""

from __future__ import annotations

KAFKA_ERROR_NAMES: dict[int, str] = {
    1: "OFFSET_OUT_OF_RANGE",
    2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    7: "REQUEST_TIMED_OUT",
    10: "MESSAGE_TOO_LARGE",
    17: "INVALID_TOPIC_EXCEPTION",
    18: "RECORD_LIST_TOO_LARGE",
    35: "UNSUPPORTED_VERSION",
    36: "TOPIC_ALREADY_EXISTS",
    37: "INVALID_PARTITIONS",
    40: "INVALID_CONFIG",
    42: "INVALID_REQUEST",
    87: "INVALID_RECORD",
}


def kafka_error_name(code: int) -> str:
    return KAFKA_ERROR_NAMES.get(code, f"KAFKA_ERROR_{code}")
