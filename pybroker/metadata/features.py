"""Finalized features (KIP-584, KIP-778): the cluster-wide feature levels UpdateFeatures changes and
ApiVersions reports, with Kafka's FeatureControlManager rules and messages.

``SUPPORTED_FEATURES`` is this broker's range of each feature (Kafka's BrokerFeatures); a new
cluster finalizes every feature at its newest level, as ``kafka-storage format`` does for Apache
Kafka 4.3.1.  A level of 0 means the feature is off, and ApiVersions leaves it out of the finalized
list.  Where the levels are kept is the ``FeatureWriter``'s business: the metadata store on a single
broker, the ``/feature`` znode in a cluster (controller/zk_features.py), whose version is the epoch.

Features pybroker does not have: metadata.version and kraft.version belong to KRaft (pybroker's
cluster is coordinated by ZooKeeper), eligible.leader.replicas.version to KIP-966, not built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

log = logging.getLogger(__name__)

GROUP_VERSION = "group.version"  # 1: the consumer rebalance protocol (KIP-848)
SHARE_VERSION = "share.version"  # 1: share groups (KIP-932)
STREAMS_VERSION = "streams.version"  # 1: the streams rebalance protocol (KIP-1071)
TRANSACTION_VERSION = "transaction.version"  # 2: transactions version 2 (KIP-890), clients decide

SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
    STREAMS_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),
}
DEFAULT_LEVELS: Mapping[str, int] = {name: high for name, (_low, high) in SUPPORTED_FEATURES.items()}
# The epoch of a single broker's features before any UpdateFeatures (what pybroker always reported).
INITIAL_EPOCH = 1


class UpgradeType(IntEnum):
    """FeatureUpdate.UpgradeType: the UpgradeType field of UpdateFeatures v1+."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


class FeatureUpdateFailed(Exception):
    """INVALID_UPDATE_VERSION, with the message Kafka answers."""


class StaleFeatures(Exception):
    """The writer found newer levels than the ones an update was checked against (another broker's
    change): the update is checked again against these."""

    def __init__(self, levels: Mapping[str, int], epoch: int) -> None:
        super().__init__(f"finalized features changed (now epoch {epoch})")
        self.levels = dict(levels)
        self.epoch = epoch


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int


# Given the new levels and the epoch they replace, keeps them durably and returns the new epoch;
# raises StaleFeatures when they changed meanwhile, another exception when they could not be kept.
FeatureWriter = Callable[[dict[str, int], int], int]
# How often an update is checked again after another broker changed the features under it.
MAX_STALE_RETRIES = 5


def _reason_not_supported(node_id: int, feature: str, level: int) -> str | None:
    """Kafka's QuorumFeatures.reasonNotSupported for this node (an unknown feature is 0-0)."""
    low, high = SUPPORTED_FEATURES.get(feature, (0, 0))
    if low <= level <= high:
        return None
    if high == 0:
        return f"Local controller {node_id} does not support this feature."
    return f"Local controller {node_id} only supports versions {low}-{high}"


def check_update(node_id: int, current: int, update: FeatureUpdate) -> str | None:
    """Why ``update`` is refused (FeatureControlManager.updateFeature, in its order), or None."""
    reason: str | None
    if update.upgrade_type not in (UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE):
        reason = "The controller does not support the given upgrade type."
    elif update.level < 0:
        reason = "A feature version cannot be less than 0."
    else:
        reason = _reason_not_supported(node_id, update.feature, update.level)
        if reason is None and update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
            reason = (
                "Can't downgrade the version of this feature without setting the upgrade type to "
                "either safe or unsafe downgrade."
            )
        elif reason is None and update.level > current and update.upgrade_type != UpgradeType.UPGRADE:
            reason = "Can't downgrade to a newer version."
    if reason is None:
        return None
    return f"Invalid update version {update.level} for feature {update.feature}. {reason}"


class FinalizedFeatures:
    """The finalized levels and their epoch, as this broker knows them."""

    def __init__(self, node_id: int, levels: Mapping[str, int] | None = None, epoch: int = INITIAL_EPOCH) -> None:
        self.node_id = node_id
        self.levels: dict[str, int] = dict(DEFAULT_LEVELS if levels is None else levels)
        self.epoch = epoch
        self.writer: FeatureWriter | None = None  # None: kept in memory only

    def level(self, feature: str) -> int:
        return self.levels.get(feature, 0)

    def enabled(self, feature: str, level: int = 1) -> bool:
        return self.level(feature) >= level

    def set(self, levels: Mapping[str, int], epoch: int) -> None:
        """Levels decided elsewhere (loaded at start, or another broker's change through ZooKeeper)."""
        levels = {name: level for name, level in levels.items() if level > 0}
        if levels != self.levels or epoch != self.epoch:
            log.info("finalized features at epoch %d: %s", epoch, levels)
        self.levels, self.epoch = levels, epoch

    def _check(self, updates: list[FeatureUpdate]) -> dict[str, int]:
        """The levels ``updates`` lead to from the current ones, or FeatureUpdateFailed."""
        proposed = dict(self.levels)
        for u in updates:
            reason = check_update(self.node_id, self.level(u.feature), u)
            if reason is not None:
                raise FeatureUpdateFailed(
                    f"The update failed for all features since the following feature had an error: {reason}"
                )
            proposed[u.feature] = u.level
        return {name: level for name, level in proposed.items() if level > 0}

    def supported(self) -> list[tuple[str, int, int]]:
        return [(name, low, high) for name, (low, high) in sorted(SUPPORTED_FEATURES.items())]

    def finalized(self) -> list[tuple[str, int]]:
        """Features at a level above 0 (Kafka leaves the others out of ApiVersions)."""
        return [(name, level) for name, level in sorted(self.levels.items()) if level > 0]

    def update(self, updates: Iterable[FeatureUpdate], validate_only: bool) -> None:
        """All updates or none (Kafka's atomic FeatureLevelRecords): FeatureUpdateFailed names the
        first refused one.  A repeated feature takes its last level.  Kafka's single controller orders
        the updates; here the writer refuses levels that changed since they were read (StaleFeatures),
        and the update is checked again against the newer ones."""
        updates = list(updates)
        for attempt in range(MAX_STALE_RETRIES + 1):
            proposed = self._check(updates)
            if validate_only or not updates:
                return
            if self.writer is None:
                epoch = self.epoch + 1
                break
            try:
                epoch = self.writer(proposed, self.epoch)
                break
            except StaleFeatures as stale:
                if attempt == MAX_STALE_RETRIES:
                    raise
                self.set(stale.levels, stale.epoch)
        for u in updates:
            log.info("feature %s finalized at level %d (upgrade type %d)", u.feature, u.level, u.upgrade_type)
        self.set(proposed, epoch)
