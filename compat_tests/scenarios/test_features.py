"""Finalized features (KIP-584, KIP-778): Kafka 4.3.1's ``kafka-features.sh`` (FeatureCommand, the Java
Admin's describeFeatures / updateFeatures) and raw UpdateFeatures requests at v0, v1 and v2.

A new cluster finalizes transaction.version 2 and group.version, share.version and streams.version 1;
an upgrade, a safe or unsafe downgrade and a dry run (validate only) do what Kafka does, with its
INVALID_UPDATE_VERSION messages; a feature at level 0 turns its API off (UNSUPPORTED_VERSION), and
every broker of a cluster reports the same levels and epoch.  Every scenario puts the features back.
"""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.brokers import encode_request, read_response, split_bootstrap
from compat_tests.clients.base import Record
from compat_tests.clients.registry import make_client
from compat_tests.kafka_tools import run_tool
from compat_tests.scenarios.test_newest_versions import call
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES

from .support import partition_leader, wait_for

API_VERSIONS, UPDATE_FEATURES, DESCRIBE_PRODUCERS = 18, 57, 61
CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT, STREAMS_GROUP_HEARTBEAT = 68, 76, 88
NONE, UNSUPPORTED_VERSION, INVALID_UPDATE_VERSION = 0, 35, 95
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
# What a new Apache Kafka 4.3.1 cluster finalizes, and each feature's supported range.
NEW_CLUSTER = {"group.version": 1, "share.version": 1, "streams.version": 1, "transaction.version": 2}
SUPPORTED = {"group.version": (0, 1), "share.version": (0, 1), "streams.version": (0, 1), "transaction.version": (0, 2)}
FAILED_FOR_ALL = "The update failed for all features since the following feature had an error: "
TOOL_TIMEOUT_S = 120


def features_tool(bootstrap: str, *args: str) -> tuple[int, str]:
    done = run_tool("kafka-features", "--bootstrap-server", bootstrap, *args, timeout_s=TOOL_TIMEOUT_S)
    return done.returncode, done.stdout + done.stderr


def describe(bootstrap: str) -> dict[str, tuple[int, int, int, int]]:
    """kafka-features describe: feature -> (supported min, supported max, finalized level, epoch)."""
    code, out = features_tool(bootstrap, "describe")
    assert code == 0, out
    found = {}
    for m in re.finditer(
        r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
        r"FinalizedVersionLevel: (\S+)\s+Epoch: (\S+)",
        out,
    ):
        name, low, high, level, epoch = m.groups()
        if name in SUPPORTED:
            found[name] = (int(low), int(high), int(level), int(epoch))
    return found


def finalized(bootstrap: str) -> tuple[dict[str, int], int]:
    """ApiVersions v4 of the first bootstrap broker: (finalized levels, epoch)."""
    body = codec.encode(REQUESTS[API_VERSIONS], 4, {"client_software_name": "compat", "client_software_version": "1"})
    with socket.create_connection(split_bootstrap(bootstrap.split(",")[0]), timeout=30) as s:
        s.sendall(encode_request(API_VERSIONS, 4, 5, body=body, flexible_header=True))
        frame = read_response(s)
    # ApiVersions answers with response header v0 whatever its version (KIP-511): no tagged fields.
    answer, _ = codec.decode(RESPONSES[API_VERSIONS], 4, frame, 4)
    levels = {f["name"]: f["max_version_level"] for f in answer["finalized_features"] if f["name"] in SUPPORTED}
    return levels, answer["finalized_features_epoch"]


def update(bootstrap: str, version: int, updates: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return call(bootstrap, UPDATE_FEATURES, version, {"timeout_ms": 30000, "feature_updates": updates, **fields})


def restore(bootstrap: str) -> None:
    """Every feature back at a new cluster's level (an upgrade, a downgrade or nothing to do)."""
    levels, _ = finalized(bootstrap)
    updates = [
        {"feature": name, "max_version_level": level, "upgrade_type": UPGRADE if levels.get(name, 0) <= level else SAFE_DOWNGRADE}
        for name, level in NEW_CLUSTER.items()
    ]
    assert update(bootstrap, 1, updates)["error_code"] == NONE
    every_broker_reports(bootstrap, NEW_CLUSTER)  # before the next scenario reads them from one broker


@pytest.fixture
def features_restored(bootstrap: str) -> Iterator[None]:
    assert finalized(bootstrap)[0] == NEW_CLUSTER, "an earlier scenario left features changed"
    try:
        yield
    finally:
        restore(bootstrap)


def every_broker_reports(bootstrap: str, levels: dict[str, int]) -> int:
    """Each broker's ApiVersions shows ``levels`` at one epoch (a cluster's follow ZooKeeper or the
    metadata log a moment later); that epoch."""

    answers: list[tuple[dict[str, int], int]] = []

    def same() -> bool:
        answers[:] = [finalized(address) for address in bootstrap.split(",")]
        return all(a == (levels, answers[0][1]) for a in answers)

    wait_for(same, timeout_s=30, what=f"every broker reporting {levels}")
    return answers[0][1]


def test_kafka_features_describe_upgrade_and_downgrade(bootstrap: str, features_restored: None) -> None:
    described = describe(bootstrap)
    assert {n: d[:3] for n, d in described.items()} == {
        n: (*SUPPORTED[n], NEW_CLUSTER[n]) for n in SUPPORTED
    }, described
    epoch = described["transaction.version"][3]

    code, out = features_tool(bootstrap, "downgrade", "--feature", "transaction.version=1", "--dry-run")
    assert (code, out.strip()) == (0, "transaction.version can be downgraded to 1."), out
    assert describe(bootstrap)["transaction.version"][2] == 2  # a dry run changes nothing

    code, out = features_tool(bootstrap, "downgrade", "--feature", "transaction.version=1")
    assert (code, out.strip()) == (0, "transaction.version was downgraded to 1."), out
    after = describe(bootstrap)["transaction.version"]
    assert after[2] == 1 and after[3] > epoch, after
    assert every_broker_reports(bootstrap, {**NEW_CLUSTER, "transaction.version": 1}) > epoch

    code, out = features_tool(bootstrap, "upgrade", "--feature", "transaction.version=3")
    assert code == 1
    assert re.search(
        "Could not upgrade transaction.version to 3. " + re.escape(FAILED_FOR_ALL)
        + r"Invalid update version 3 for feature transaction.version. Local controller \d+ only supports versions 0-2",
        out,
    ), out
    code, out = features_tool(bootstrap, "upgrade", "--feature", "no.such.version=1")
    assert code == 1
    assert re.search(r"Invalid update version 1 for feature no.such.version. Local controller \d+ does not support this feature.", out), out

    code, out = features_tool(bootstrap, "upgrade", "--feature", "transaction.version=2")
    assert (code, out.strip()) == (0, "transaction.version was upgraded to 2."), out
    # disable: a safe downgrade to 0, after which the feature is no longer finalized
    code, out = features_tool(bootstrap, "disable", "--feature", "streams.version")
    assert (code, out.strip()) == (0, "streams.version was disabled."), out
    assert describe(bootstrap)["streams.version"][2] == 0
    every_broker_reports(bootstrap, {n: v for n, v in NEW_CLUSTER.items() if n != "streams.version"})


@pytest.mark.parametrize("version", [0, 1, 2])
def test_update_features_answers(bootstrap: str, features_restored: None, version: int) -> None:
    def refused(updates: list[dict[str, Any]], reason: str, **fields: Any) -> None:
        answer = update(bootstrap, version, updates, **fields)
        assert answer["error_code"] == INVALID_UPDATE_VERSION, answer
        assert answer["error_message"] == FAILED_FOR_ALL + reason, answer
        assert answer.get("results", []) == []
        assert finalized(bootstrap)[0] == NEW_CLUSTER  # all or nothing

    def typed(feature: str, level: int, upgrade_type: int) -> dict[str, Any]:
        if version == 0:  # no UpgradeType at v0: AllowDowngrade, which 4.3.1 does not act on
            return {"feature": feature, "max_version_level": level, "allow_downgrade": upgrade_type != UPGRADE}
        return {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}

    refused(
        [typed("transaction.version", -1, UPGRADE)],
        "Invalid update version -1 for feature transaction.version. A feature version cannot be less than 0.",
    )
    if version >= 1:
        refused(
            [typed("transaction.version", 0, UPGRADE)],
            "Invalid update version 0 for feature transaction.version. Can't downgrade the version of this"
            " feature without setting the upgrade type to either safe or unsafe downgrade.",
        )
        refused(
            [typed("share.version", 1, UPGRADE), typed("transaction.version", 2, 7)],
            "Invalid update version 2 for feature transaction.version. The controller does not support the given"
            " upgrade type.",
        )
        # Validate only: the answer of a real update, nothing changed.
        answer = update(bootstrap, version, [typed("transaction.version", 1, SAFE_DOWNGRADE)], validate_only=True)
        assert answer["error_code"] == NONE, answer
        assert finalized(bootstrap)[0] == NEW_CLUSTER
        answer = update(bootstrap, version, [typed("group.version", 0, UNSAFE_DOWNGRADE)])
        assert (answer["error_code"], answer["error_message"]) == (NONE, None), answer
        # On a cluster the first broker learns of the change a moment after the controller answered.
        every_broker_reports(bootstrap, {n: v for n, v in NEW_CLUSTER.items() if n != "group.version"})
        refused_now = update(bootstrap, version, [typed("group.version", 1, SAFE_DOWNGRADE)])
        assert refused_now["error_message"] == FAILED_FOR_ALL + (
            "Invalid update version 1 for feature group.version. Can't downgrade to a newer version."
        ), refused_now
    else:
        refused(
            [typed("group.version", 1, UPGRADE), typed("transaction.version", 1, SAFE_DOWNGRADE)],
            "Invalid update version 1 for feature transaction.version. Can't downgrade the version of this"
            " feature without setting the upgrade type to either safe or unsafe downgrade.",
        )
    # A successful update lists every requested feature (v0-1), NONE; v2 has no results.
    answer = update(bootstrap, version, [typed("group.version", 1, UPGRADE), typed("share.version", 1, UPGRADE)])
    assert answer["error_code"] == NONE, answer
    if version < 2:
        assert answer["results"] == [
            {"feature": "group.version", "error_code": NONE, "error_message": "NONE"},
            {"feature": "share.version", "error_code": NONE, "error_message": "NONE"},
        ]
    else:
        assert "results" not in answer
    assert update(bootstrap, version, [])["error_code"] == NONE


def _member_id() -> str:
    return uuid.uuid4().hex[:22]


def test_a_feature_at_level_0_turns_its_api_off(bootstrap: str, features_restored: None) -> None:
    """group.version, share.version and streams.version 0: their heartbeats answer UNSUPPORTED_VERSION
    (before any group is looked at), and come back once the feature is upgraded again."""
    heartbeats = {
        "group.version": (
            CONSUMER_GROUP_HEARTBEAT,
            0,
            {"member_epoch": 0, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [], "topic_partitions": []},
        ),
        "share.version": (SHARE_GROUP_HEARTBEAT, 1, {"member_epoch": 0, "subscribed_topic_names": []}),
        "streams.version": (
            STREAMS_GROUP_HEARTBEAT,
            0,
            {"member_epoch": 0, "rebalance_timeout_ms": 30000, "topology": {"epoch": 0, "subtopologies": []}},
        ),
    }
    off = [{"feature": name, "max_version_level": 0, "upgrade_type": SAFE_DOWNGRADE} for name in heartbeats]
    assert update(bootstrap, 1, off)["error_code"] == NONE
    every_broker_reports(bootstrap, {"transaction.version": 2})
    for name, (key, version, body) in heartbeats.items():
        group = f"features-{name}-{uuid.uuid4().hex[:8]}"
        answer = call(bootstrap, key, version, {"group_id": group, "member_id": _member_id(), **body})
        assert (answer["error_code"], answer["error_message"]) == (UNSUPPORTED_VERSION, None), (name, answer)
    code, out = features_tool(bootstrap, "upgrade", "--feature", "group.version=1", "--feature", "share.version=1",
                              "--feature", "streams.version=1")  # fmt: skip
    assert code == 0, out
    every_broker_reports(bootstrap, NEW_CLUSTER)
    for name, (key, version, body) in heartbeats.items():
        group = f"features-{name}-{uuid.uuid4().hex[:8]}"
        answer = call(bootstrap, key, version, {"group_id": group, "member_id": _member_id(), **body})
        assert answer["error_code"] != UNSUPPORTED_VERSION, (name, answer)


@pytest.mark.parametrize("level", [1, 2])
def test_transaction_version_decides_what_the_java_producer_does(
    bootstrap: str, make_topic, features_restored: None, level: int
) -> None:
    """The Java producer (kafka-clients 4.4) uses transactions version 2 only when the cluster finalizes
    transaction.version 2: then every EndTxn bumps its epoch, so after three committed transactions the
    partition's producer state (DescribeProducers, from the last marker) is at epoch 3; at level 1 the
    epoch stays 0."""
    topic = make_topic()
    if level != 2:
        answer = update(bootstrap, 1, [{"feature": "transaction.version", "max_version_level": level,
                                        "upgrade_type": SAFE_DOWNGRADE}])  # fmt: skip
        assert answer["error_code"] == NONE, answer
    every_broker_reports(bootstrap, {**NEW_CLUSTER, "transaction.version": level})
    transactions = [([Record(None, f"txn-{i}".encode(), partition=0)], True) for i in range(3)]
    make_client("java4").produce_transactions(bootstrap, topic, f"tv{level}-{uuid.uuid4().hex[:8]}", transactions)
    leader = partition_leader(bootstrap, topic)[1]
    answer = call(leader, DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    [partition] = answer["topics"][0]["partitions"]
    [producer] = partition["active_producers"]
    assert producer["producer_epoch"] == (3 if level == 2 else 0), producer
