"""Cross-check against an independent implementation: kafka-python 3.0's JSON-driven codec must decode
what we encode, and re-encode it to the very same bytes, for every API and version both declare."""

from __future__ import annotations

import importlib
import pkgutil
import warnings

import pytest
from protocol_samples import MessageFactory

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES


def _kafka_python_messages() -> dict[tuple[int, str], type]:
    import kafka.protocol
    from kafka.protocol.api_message import ApiMessage

    found: dict[tuple[int, str], type] = {}
    for module_info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in module_info.name or ".schemas" in module_info.name:
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, ApiMessage)
                and value is not ApiMessage
                and getattr(value, "_valid_versions", None)
                and value._class_version is None
            ):
                found[(value.API_KEY, value.type)] = value
    return found


# kafka-python loads its JSON schemas through a deprecated importlib.resources call; not our concern.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    KAFKA_PYTHON = _kafka_python_messages()
CASES = []
for (api_key, kind), their_class in sorted(KAFKA_PYTHON.items()):
    ours = (REQUESTS if kind == "request" else RESPONSES).get(api_key)
    if ours is None:
        continue
    low = max(ours.valid_versions.low, their_class.min_version)
    high = min(ours.valid_versions.high, their_class.max_version)
    CASES.extend(pytest.param(ours, their_class, v, id=f"{ours.name}-v{v}") for v in range(low, high + 1))


def test_the_cross_check_covers_the_core_apis() -> None:
    covered = {(case.values[0].api_key, case.values[2]) for case in CASES}
    for api_key, version in [(0, 9), (1, 12), (2, 7), (3, 12), (18, 3), (10, 4), (11, 7), (8, 8), (22, 4)]:
        assert (api_key, version) in covered


@pytest.mark.parametrize(("ours", "their_class", "version"), CASES)
def test_kafka_python_reads_and_rewrites_our_bytes(ours, their_class, version) -> None:
    factory = MessageFactory(seed=version, unknown_tags=False)
    for _ in range(2):
        message = factory.message(ours, version)
        if ours.name == "ApiVersionsResponse":
            message["error_code"] = 0  # kafka-python reads any ApiVersions error body as v0 (KIP-511)
        encoded = codec.encode(ours, version, message)
        theirs = their_class.decode(encoded, version=version)
        if not hasattr(theirs, "_header"):
            theirs._header = None  # kafka-python only sets this on messages it builds itself
        assert bytes(theirs.encode(version=version)) == encoded
