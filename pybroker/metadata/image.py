"""The metadata image: what the cluster looks like to the request handlers, as one immutable value.

Kafka's KRaft brokers read every topic, partition and broker from a ``MetadataImage`` that the
metadata log publishes; pybroker's handlers do the same, whoever produces the image.  A single
broker builds it from its own ``MetadataStore`` and partitions (``metadata/local.py``); a cluster
publishes the image its controller wrote.  Handlers never ask where it came from.

Names are Kafka's (``org.apache.kafka.image`` and ``org.apache.kafka.metadata``): ``BrokerRegistration``,
``PartitionRegistration`` (replicas, ISR, leader, leader epoch, partition epoch), ``TopicImage``.
Images are replaced, never changed: a new one shares every unchanged ``TopicImage`` with the old,
so caches keyed on a ``TopicImage`` object (apis/metadata.TopicMetadataCache) stay valid exactly as
long as that topic has not changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

NO_LEADER = -1  # Kafka's LeaderConstants.NO_LEADER: the partition has no leader right now

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker as clients reach it (its advertised listeners) and as placement sees it (its rack).

    ``host``/``port`` are its first (or only) advertised listener's; ``listeners`` holds every
    advertised listener by name (Kafka's BrokerRegistration.listeners), so a client is answered the
    endpoints of the listener it connected on. A registration without ``listeners`` has one endpoint,
    ``host``/``port``, for every listener."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=lambda: _EMPTY)

    def endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """(host, port) on the named listener; None if this broker has no such listener."""
        if not self.listeners:
            return self.host, self.port
        return self.listeners.get(listener_name)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's replica set and leadership, as the controller wrote them."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


# A partition the metadata knows of but no broker hosts yet (its files are still being made).
UNASSIGNED = PartitionRegistration(replicas=(), isr=(), leader=NO_LEADER, leader_epoch=-1)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]
    configs: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Topics (by name, in creation order, and by id), live brokers, the controller and the cluster id."""

    cluster_id: str
    controller_id: int
    brokers: Mapping[int, BrokerRegistration]
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def partition(self, topic: str, index: int) -> PartitionRegistration | None:
        t = self.topics_by_name.get(topic)
        return None if t is None else t.partitions.get(index)

    def broker(self, node_id: int) -> BrokerRegistration | None:
        return self.brokers.get(node_id)

    def with_topics(self, changed: Mapping[str, TopicImage | None]) -> MetadataImage:
        """A new image with ``changed`` applied (None: the topic is gone).  A topic that exists keeps
        its place in the order; a new one (or one created again with a new id) goes last."""
        by_name = dict(self.topics_by_name)
        by_id = dict(self.topics_by_id)
        for name, topic in changed.items():
            old = by_name.get(name)
            if old is not None and (topic is None or topic.topic_id != old.topic_id):
                del by_name[name]
                by_id.pop(old.topic_id, None)
            if topic is not None:
                by_name[name] = topic
                by_id[topic.topic_id] = topic
        return MetadataImage(
            self.cluster_id,
            self.controller_id,
            self.brokers,
            MappingProxyType(by_name),
            MappingProxyType(by_id),
        )

    def with_brokers(
        self, brokers: Iterable[BrokerRegistration], controller_id: int | None = None
    ) -> MetadataImage:
        return MetadataImage(
            self.cluster_id,
            self.controller_id if controller_id is None else controller_id,
            MappingProxyType({b.node_id: b for b in brokers}),
            self.topics_by_name,
            self.topics_by_id,
        )
