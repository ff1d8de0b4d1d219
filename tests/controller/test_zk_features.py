"""Finalized features in ZooKeeper's /feature: two brokers updating from the same epoch lose neither
change (the later write is refused, checked again against the newer levels, then written), and an
update the newer levels make invalid is refused with Kafka's message."""

from __future__ import annotations

import pytest

from pybroker.controller.zk_client import KafkaZkClient
from pybroker.controller.zk_features import ZkFeatures
from pybroker.metadata.features import (
    DEFAULT_LEVELS,
    FeatureUpdate,
    FeatureUpdateFailed,
    FinalizedFeatures,
    UpgradeType,
)

pytestmark = pytest.mark.timeout(120)


def test_concurrent_updates_from_two_brokers(zk_connect: str) -> None:
    clients = [KafkaZkClient(zk_connect, session_timeout_ms=6000) for _ in range(2)]
    brokers = []
    for node, client in enumerate(clients, start=1):
        client.start()
        zk_features = ZkFeatures(client)
        features = FinalizedFeatures(node)
        levels, epoch = zk_features.read_or_create(DEFAULT_LEVELS)
        features.set(levels, epoch)
        features.writer = zk_features.write
        brokers.append((features, zk_features))
    try:
        (one, zk_one), (two, _) = brokers
        assert one.epoch == two.epoch == 0
        one.update([FeatureUpdate("group.version", 0, UpgradeType.SAFE_DOWNGRADE)], validate_only=False)
        # Broker two has not seen it (no watch here) and updates another feature from epoch 0.
        two.update([FeatureUpdate("transaction.version", 1, UpgradeType.SAFE_DOWNGRADE)], validate_only=False)
        levels, epoch = zk_one.read_or_create(DEFAULT_LEVELS)
        assert (levels, epoch) == ({"share.version": 1, "streams.version": 1, "transaction.version": 1}, 2)
        assert (two.levels, two.epoch) == (levels, 2)
        # Broker one, still at epoch 1, downgrades group.version "to" 1: against the newer levels (0) that
        # is an upgrade asked for as a downgrade, and refused.
        with pytest.raises(FeatureUpdateFailed, match="Invalid update version 1 for feature group.version. "
                                                       "Can't downgrade to a newer version."):  # fmt: skip
            one.update([FeatureUpdate("group.version", 1, UpgradeType.SAFE_DOWNGRADE)], validate_only=False)
        assert zk_one.read_or_create(DEFAULT_LEVELS)[1] == 2
    finally:
        for client in clients:
            client.close()
