"""What the group and transaction coordinators use of the broker, injected: ``CoordinatorServices``.

The coordinators keep their state in internal topics (``__consumer_offsets``,
``__transaction_state``) that the broker hosts; they reach those partitions, the topics' records and
topic creation through these callables, never through ``pybroker.broker``.  On a single broker they
are the replica manager's and the local controller's; a cluster hands in its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.metadata.store import TopicRecord
    from pybroker.replication.partition import Partition


@dataclass(slots=True)
class CoordinatorServices:
    config: BrokerConfig
    # The partition this broker hosts, or None (ReplicaManager.get_partition).
    partition: Callable[[str, int], Partition | None]
    # Every hosted partition (the log cleaner of compacted internal topics walks them).
    all_partitions: Callable[[], Iterable[Partition]]
    # A topic's record (name, id, partition count, configs, internal), or None.
    topic: Callable[[str], TopicRecord | None]
    topic_names: Callable[[], Iterable[str]]
    # Create a topic at once (an internal topic at start-up or after it was deleted).
    create_topic: Callable[[str, int, dict[str, str | None]], TopicRecord]
    mark_internal: Callable[[str], None]
    allocate_producer_id: Callable[[], int]
    # The group coordinator once it runs (a COMMIT/ABORT marker on __consumer_offsets completes its
    # transactional offsets).
    group_coordinator: Callable[[], GroupCoordinator | None]
