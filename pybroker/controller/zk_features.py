"""The cluster's finalized features in ZooKeeper: Kafka's ZK-mode ``/feature`` znode (FeatureZNode).

``/feature`` holds ``{"version": 2, "status": 1, "features": {name: {"max_version_level": n}}}``
and its znode version is the finalized features epoch, as Kafka's ZK-mode brokers reported it
(FinalizedFeatureChangeListener).  The first broker to start creates it with a new cluster's levels;
UpdateFeatures on any broker writes it with the version it read (after a concurrent change the
update is checked again against the newer levels, never written over them), and every broker follows
it with a data watch, so all report the same levels and epoch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from pybroker.controller.zk_client import KafkaZkClient
from pybroker.metadata.features import StaleFeatures

log = logging.getLogger(__name__)

FEATURE_PATH = "/feature"
FEATURE_ZNODE_VERSION = 2  # FeatureZNode.V2
ENABLED = 1  # FeatureZNodeStatus.Enabled


def encode(levels: Mapping[str, int]) -> bytes:
    doc = {
        "version": FEATURE_ZNODE_VERSION,
        "status": ENABLED,
        "features": {name: {"max_version_level": level} for name, level in sorted(levels.items())},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes | None) -> dict[str, int]:
    if not data:
        return {}
    doc = json.loads(data)
    if doc.get("status", ENABLED) != ENABLED:
        return {}
    return {name: int(r["max_version_level"]) for name, r in doc.get("features", {}).items()}


class ZkFeatures:
    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk
        self._stopped = False

    def read_or_create(self, defaults: Mapping[str, int]) -> tuple[dict[str, int], int]:
        """(levels, epoch): what ``/feature`` holds, created with ``defaults`` when absent."""
        kazoo = self.zk.kazoo
        try:
            self.zk.call(kazoo.create, FEATURE_PATH, encode(defaults))
            log.info("created %s with %s", FEATURE_PATH, dict(defaults))
        except NodeExistsError:
            pass  # another broker (or an earlier start) made it
        data, stat = self.zk.call(kazoo.get, FEATURE_PATH)
        return decode(data), stat.version

    def write(self, levels: dict[str, int], epoch: int) -> int:
        """Replace the levels of epoch ``epoch``; the new epoch.  StaleFeatures (with what
        ``/feature`` holds now) when another broker changed it since."""
        try:
            stat = self.zk.call(self.zk.kazoo.set, FEATURE_PATH, encode(levels), version=epoch)
        except BadVersionError:
            data, now = self.zk.call(self.zk.kazoo.get, FEATURE_PATH)
            raise StaleFeatures(decode(data), now.version) from None
        return int(stat.version)

    async def watch(self, on_change: Callable[[dict[str, int], int], None]) -> None:
        """``on_change(levels, epoch)`` on the running loop whenever ``/feature`` changes."""
        loop = asyncio.get_running_loop()

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if self._stopped or loop.is_closed():
                return False
            if stat is not None:
                loop.call_soon_threadsafe(on_change, decode(data), stat.version)
            return None

        await loop.run_in_executor(None, lambda: DataWatch(self.zk.kazoo, FEATURE_PATH, on_data))

    def stop(self) -> None:
        self._stopped = True
