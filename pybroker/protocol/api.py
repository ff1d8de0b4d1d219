"""The API table: every declared request and response, by API key.

Handlers use ``REQUESTS[api_key]`` / ``RESPONSES[api_key]`` with ``pybroker.protocol.codec``.
"""

from __future__ import annotations

import importlib

from pybroker.protocol import messages
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.protocol.schema import MessageSpec

# Kafka's AUTHORIZED_OPERATIONS_OMITTED (Integer.MIN_VALUE): the authorized-operations field of a
# Describe* response when the request did not ask for it.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _all_messages() -> list[MessageSpec]:
    found: list[MessageSpec] = []
    for family in messages.FAMILIES:
        module = importlib.import_module(f"{messages.__name__}.{family}")
        found.extend(module.MESSAGES)
    return found


ALL_MESSAGES: tuple[MessageSpec, ...] = tuple(_all_messages())

REQUESTS: dict[int, MessageSpec] = {
    spec.api_key: spec for spec in ALL_MESSAGES if spec.kind == "request" and spec.api_key is not None
}
RESPONSES: dict[int, MessageSpec] = {
    spec.api_key: spec for spec in ALL_MESSAGES if spec.kind == "response" and spec.api_key is not None
}
API_NAMES: dict[int, str] = {api_key: spec.name[: -len("Request")] for api_key, spec in REQUESTS.items()}

_BY_NAME = {spec.name: spec for spec in ALL_MESSAGES}
REQUEST_HEADER: MessageSpec = _BY_NAME["RequestHeader"]
RESPONSE_HEADER: MessageSpec = _BY_NAME["ResponseHeader"]
# The consumer protocol carried as bytes inside JoinGroup/SyncGroup (used by the group coordinator).
CONSUMER_PROTOCOL_SUBSCRIPTION: MessageSpec = _BY_NAME["ConsumerProtocolSubscription"]
CONSUMER_PROTOCOL_ASSIGNMENT: MessageSpec = _BY_NAME["ConsumerProtocolAssignment"]

assert REQUESTS.keys() == RESPONSES.keys(), "every request needs its response"
assert set(ApiKey) == REQUESTS.keys(), "ApiKey is generated from the same definitions"

__all__ = ["ALL_MESSAGES", "API_NAMES", "REQUESTS", "RESPONSES", "ApiKey"]
