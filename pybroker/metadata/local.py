"""The single broker's metadata image: built from its ``MetadataStore`` (topics, ids, partition
counts, configs) and the partitions it hosts (leader, epoch, replicas, ISR), one topic at a time.

Whatever changes a topic says so (``topic_changed``: the store after every topic write,
``Partition``'s state listener, the broker when it registers or removes partitions); the image is
rebuilt for those topics only, and only when someone next reads it, so creating a topic of 10,000
partitions costs one rebuild of that topic, not 10,000.  A cluster publishes its controller's image
instead; the handlers read either through the same ``image()`` call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from pybroker.metadata.image import (
    UNASSIGNED,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)

if TYPE_CHECKING:
    from pybroker.metadata.store import MetadataStore


class HostedPartition(Protocol):
    """What the image reads of a partition this broker hosts (replication.partition.Partition)."""

    topic: str

    @property
    def leader_id(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def isr(self) -> tuple[int, ...]: ...


class MetadataPublisher(Protocol):
    """What the broker and its controller use of the image's publisher: ``LocalMetadataPublisher``, or
    a cluster's ``ZkMetadataPublisher`` (cluster_mode)."""

    @property
    def listeners(self) -> list[Callable[[str], None]]: ...
    def set_cluster_id(self, cluster_id: str) -> None: ...
    def topic_changed(self, name: str) -> None: ...
    def partition_changed(self, partition: HostedPartition) -> None: ...
    def image(self) -> MetadataImage: ...


class LocalMetadataPublisher:
    """Publishes the image of a broker that is its own controller (no ``zookeeper.connect``)."""

    def __init__(
        self,
        store: MetadataStore,
        hosted: Callable[[str, int], HostedPartition | None],
        broker: BrokerRegistration,
        cluster_id: str = "",
    ) -> None:
        self._store = store
        self._hosted = hosted
        self._image = MetadataImage(cluster_id, broker.node_id, MappingProxyType({broker.node_id: broker}))
        self._dirty: set[str] = set(store.topics)
        # Told the name of each topic whose image is about to change (caches of encoded topics).
        self.listeners: list[Callable[[str], None]] = []

    def set_cluster_id(self, cluster_id: str) -> None:
        img = self._image
        self._image = MetadataImage(
            cluster_id, img.controller_id, img.brokers, img.topics_by_name, img.topics_by_id
        )

    def set_brokers(self, brokers: Iterable[BrokerRegistration]) -> None:
        """Replace the registered brokers (tests of what handlers make of other brokers' replicas)."""
        self._image = self._image.with_brokers(brokers)

    def topic_changed(self, name: str) -> None:
        self._dirty.add(name)
        for fn in self.listeners:
            fn(name)

    def partition_changed(self, partition: HostedPartition) -> None:
        """``Partition.state_listener``: leader, epoch, replicas or ISR changed."""
        self.topic_changed(partition.topic)

    def image(self) -> MetadataImage:
        if self._dirty:
            self._publish()
        return self._image

    def _publish(self) -> None:
        changed: dict[str, TopicImage | None] = {}
        for name in self._dirty:
            rec = self._store.topics.get(name)
            changed[name] = None if rec is None else self._topic_image(rec)
        self._dirty.clear()
        self._image = self._image.with_topics(changed)

    def _topic_image(self, rec) -> TopicImage:
        hosted = self._hosted
        partitions: dict[int, PartitionRegistration] = {}
        for i in range(rec.partitions):
            p = hosted(rec.name, i)
            if p is None:
                partitions[i] = UNASSIGNED  # recorded, its log not made yet
            else:
                partitions[i] = PartitionRegistration(
                    replicas=p.replicas, isr=p.isr, leader=p.leader_id, leader_epoch=p.leader_epoch
                )
        return TopicImage(
            rec.name,
            rec.topic_id,
            MappingProxyType(partitions),
            MappingProxyType(dict(rec.configs)),
            rec.internal,
        )
