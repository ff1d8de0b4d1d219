"""Finalized features in a cluster: the ``/feature`` znode (Kafka's ZK-mode FeatureZNode) is the truth;
an UpdateFeatures on any broker reaches every broker, and one that was down learns it at start."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from compat_tests.scenarios.test_features import NEW_CLUSTER, SAFE_DOWNGRADE, UPGRADE, finalized, update

from .conftest import wait_for


def test_features_are_the_clusters(cluster, zookeeper) -> None:
    brokers = cluster.brokers
    _, epoch = finalized(brokers[1].bootstrap)
    for node in (2, 3):
        assert finalized(brokers[node].bootstrap) == (NEW_CLUSTER, epoch)

    downgrade = {"feature": "transaction.version", "max_version_level": 1, "upgrade_type": SAFE_DOWNGRADE}
    assert update(brokers[2].bootstrap, 1, [downgrade])["error_code"] == 0
    changed = {**NEW_CLUSTER, "transaction.version": 1}
    for node in (1, 2, 3):
        wait_for(lambda node=node: finalized(brokers[node].bootstrap) == (changed, epoch + 1), 30,
                 f"broker {node} to report the downgrade")  # fmt: skip

    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start()
    try:
        data, stat = zk.get("/feature")
    finally:
        zk.stop()
        zk.close()
    doc = json.loads(data)
    assert stat.version == epoch + 1
    assert doc["features"]["transaction.version"] == {"max_version_level": 1}
    assert (doc["version"], doc["status"]) == (2, 1)

    # Broker 3 is down while group.version goes to 0: it reads /feature when it starts again.
    brokers[3].stop()
    off = {"feature": "group.version", "max_version_level": 0, "upgrade_type": SAFE_DOWNGRADE}
    assert update(brokers[1].bootstrap, 1, [off])["error_code"] == 0
    brokers[3].start(timeout_s=60)
    without_groups = {n: v for n, v in changed.items() if n != "group.version"}
    assert finalized(brokers[3].bootstrap) == (without_groups, epoch + 2)

    back = [{"feature": n, "max_version_level": v, "upgrade_type": UPGRADE} for n, v in NEW_CLUSTER.items()]
    assert update(brokers[3].bootstrap, 1, back)["error_code"] == 0
    for node in (1, 2, 3):
        wait_for(lambda node=node: finalized(brokers[node].bootstrap) == (NEW_CLUSTER, epoch + 3), 30,
                 f"broker {node} to report the restored features")  # fmt: skip
