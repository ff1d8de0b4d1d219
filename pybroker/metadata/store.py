"""The single-node metadata image: topics (stable topic ids, partition counts, config overrides)
and the producer-id block.

On a Kafka cluster this state lives in the controller (ZooKeeper or the KRaft metadata log); a
single broker keeps it in one JSON document written atomically beside its logs.  Replication work
replaces the file with the controller's store without changing this interface.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pybroker.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "pybroker-metadata.json"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
PRODUCER_ID_BLOCK = 1000


# Kafka's org.apache.kafka.common.internals.Topic.isInternal: clients may not produce to these.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


class InvalidTopicName(ValueError):
    pass


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate)."""
    if not name:
        raise InvalidTopicName("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicName('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicName(
            f"Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": self.configs,
            "internal": self.internal,
        }

    @classmethod
    def from_json(cls, d: dict) -> TopicRecord:
        return cls(
            d["name"], uuid.UUID(d["topic_id"]), int(d["partitions"]), dict(d["configs"]), bool(d["internal"])
        )


class MetadataStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.topics: dict[str, TopicRecord] = {}
        self.topics_by_id: dict[uuid.UUID, TopicRecord] = {}
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self.cluster_id: str | None = None
        # Dynamic broker configs by resource name ("" the cluster default, "<node id>" one broker),
        # as Kafka keeps them in its metadata log (ConfigRecords of the BROKER resource).
        self.broker_configs: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        doc = json.loads(self.path.read_text())
        for t in doc.get("topics", []):
            rec = TopicRecord.from_json(t)
            self.topics[rec.name] = rec
            self.topics_by_id[rec.topic_id] = rec
        # Never hand out an id from a block that may already have been used before a crash.
        self._next_producer_id = self._producer_id_block_end = int(doc.get("producer_id_block_end", 0))
        self.broker_configs = {str(k): dict(v) for k, v in doc.get("broker_configs", {}).items()}
        log.info("loaded metadata for %d topics from %s", len(self.topics), self.path)

    def save(self) -> None:
        doc = {
            "version": 1,
            "topics": [t.to_json() for t in sorted(self.topics.values(), key=lambda t: t.name)],
            "producer_id_block_end": self._producer_id_block_end,
            "broker_configs": {k: v for k, v in self.broker_configs.items() if v},
        }
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())

    def add_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicRecord:
        """``topic_id`` is given when the partitions' directories were made (and named in their
        partition.metadata) before the topic is recorded, as large CreateTopics do."""
        rec = TopicRecord(name, topic_id or uuid.uuid4(), partitions, dict(configs), internal)
        self.topics[name] = rec
        self.topics_by_id[rec.topic_id] = rec
        self.save()
        return rec

    def remove_topic(self, name: str) -> TopicRecord:
        rec = self.topics.pop(name)
        self.topics_by_id.pop(rec.topic_id, None)
        self.save()
        return rec

    def set_partitions(self, name: str, partitions: int) -> None:
        self.topics[name].partitions = partitions
        self.save()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self.save()

    def set_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None:
        self.broker_configs[resource_name] = dict(configs)
        self.save()

    def allocate_producer_id(self) -> int:
        """Ids come from persisted blocks, as Kafka's ProducerIdManager does, so an id is never
        reused across restarts even though only the block boundary is written."""
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self.save()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid
