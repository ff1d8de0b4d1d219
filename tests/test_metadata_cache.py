"""Metadata's per-topic encoding cache (apis/metadata.py): the response it gives is byte for byte
the response built without it, at every Metadata version, and it follows every change of leader,
epoch, replicas, ISR, partition count and topic identity.

The handler runs against a small stand-in for the broker holding real ``Partition`` objects (the
listener wiring of the real broker is exercised by tests/integration/test_metadata_cache_live.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pybroker.apis import RequestContext
from pybroker.apis.metadata import TopicMetadataCache, handle_metadata, topic_metadata
from pybroker.metadata.image import BrokerRegistration, MetadataImage
from pybroker.metadata.local import LocalMetadataPublisher
from pybroker.metadata.store import MetadataStore, TopicRecord
from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES
from pybroker.protocol.codec import RequestHeader
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager
from pybroker.security.acl import (
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from pybroker.security.authorizer import Authorizer
from pybroker.security.context import ConnectionSecurity, KafkaPrincipal

METADATA = RESPONSES[3]
VERSIONS = range(METADATA.min_version, METADATA.max_version + 1)


class _Log:
    log_end_offset = 0


class _Broker:
    """The handler's services (apis/services.py) over a real metadata store, replica manager and image
    publisher, wired as the broker wires them; topic administration never creates anything."""

    node_id = 1
    authorizer: Authorizer | None = None  # none configured, unless a test sets one

    def __init__(self, directory: Path) -> None:
        self.metadata = MetadataStore(directory)
        self.replica_manager = ReplicaManager(self.node_id)
        self.publisher = LocalMetadataPublisher(
            self.metadata,
            self.replica_manager.get_partition,
            BrokerRegistration(self.node_id, "127.0.0.1", 9092),
            "cluster",
        )
        self.metadata.topic_listener = self.publisher.topic_changed
        self.metadata_cache = TopicMetadataCache()
        self.publisher.listeners.append(self.metadata_cache.invalidate)

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        return self.replica_manager.partitions

    def metadata_image(self) -> MetadataImage:
        return self.publisher.image()

    @property
    def topic_admin(self) -> _Broker:
        return self

    def add_topic(self, name: str, count: int) -> TopicRecord:
        rec = self.metadata.add_topic(name, count, {})
        for i in range(count):
            self.register(rec, i)
        return rec

    def register(self, rec: TopicRecord, index: int) -> Partition:
        p = Partition(rec.name, index, rec.topic_id, _Log(), self.node_id)  # type: ignore[arg-type]
        p.state_listener = self.publisher.partition_changed
        self.publisher.topic_changed(rec.name)
        self.replica_manager.add_partition(p)
        return p

    def delete_topic(self, name: str) -> None:
        rec = self.metadata.remove_topic(name)
        for i in range(rec.partitions):
            self.replica_manager.remove_partition(name, i)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.replica_manager.get_partition(topic, index)

    def auto_create_topic(self, name: str) -> TopicRecord | None:
        return None


def _ctx(broker: _Broker, version: int, principal: str = "User:ANONYMOUS") -> RequestContext:
    header = RequestHeader(
        api_key=3, api_version=version, correlation_id=1, client_id="test", body_offset=0, complete=True
    )
    security = ConnectionSecurity("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 5555, KafkaPrincipal.parse(principal))
    return RequestContext(broker, header, "peer", None, security)  # type: ignore[arg-type]  # Metadata counts nothing


def _all_topics(version: int) -> dict:
    return {"topics": None if version >= 1 else [], "allow_auto_topic_creation": True}


def _cached(broker: _Broker, version: int, request: dict | None = None) -> bytes:
    return codec.encode(METADATA, version, handle_metadata(_ctx(broker, version), request or _all_topics(version)))


def _uncached(broker: _Broker, version: int, names: list[str] | None = None) -> bytes:
    """The same response with every topic built as dicts, as the handler did before the cache."""
    ctx = _ctx(broker, version)
    image = broker.metadata_image()
    topics = [image.topics_by_name[n] for n in names] if names else list(image.topics_by_name.values())
    response = handle_metadata(ctx, _all_topics(version))
    response["topics"] = [topic_metadata(t, image.brokers) for t in topics]  # replaces the cached entries
    return codec.encode(METADATA, version, response)


@pytest.fixture
def broker(tmp_path: Path) -> _Broker:
    b = _Broker(tmp_path)
    # Brokers 2 and 3 registered too, so that replicas and leaders may move to them.
    b.publisher.set_brokers(BrokerRegistration(n, "127.0.0.1", 9091 + n) for n in (1, 2, 3))
    b.add_topic("orders", 50)
    b.add_topic("events", 3)
    return b


@pytest.mark.parametrize("version", VERSIONS)
def test_cached_response_is_byte_identical_at_every_version(broker: _Broker, version: int) -> None:
    first = _cached(broker, version)  # builds the entries
    assert len(broker.metadata_cache) == 2
    second = _cached(broker, version)  # served from them
    assert first == second == _uncached(broker, version)
    named = {"topics": [{"name": "events", "topic_id": uuid.UUID(int=0)}], "allow_auto_topic_creation": True}
    if version >= 1:
        assert _cached(broker, version, named) == _uncached(broker, version, ["events"])


def test_versions_share_an_entry_only_when_they_encode_alike(broker: _Broker) -> None:
    for version in VERSIONS:  # every version, in one cache: each answer must still be its own
        _cached(broker, version)
    for version in reversed(VERSIONS):
        assert _cached(broker, version) == _uncached(broker, version)


@pytest.mark.parametrize("version", [0, 7, 12])
def test_leadership_changes_reach_the_next_response(broker: _Broker, version: int) -> None:
    _cached(broker, version)
    p = broker.partition("orders", 7)
    assert p is not None
    p.leader_epoch = 4
    assert len(broker.metadata_cache) == 1  # only that topic's entry went
    assert _cached(broker, version) == _uncached(broker, version)
    p.isr = [1, 2]
    p.replicas = [1, 2, 3]
    after = _cached(broker, version)
    assert after == _uncached(broker, version)
    p.leader_id = 2
    assert _cached(broker, version) == _uncached(broker, version) != after
    decoded, _ = codec.decode(METADATA, version, _cached(broker, version))
    orders = next(t for t in decoded["topics"] if t["name"] == "orders")
    assert (orders["partitions"][7]["leader_id"], orders["partitions"][7]["replica_nodes"]) == (2, [1, 2, 3])
    assert orders["partitions"][7]["isr_nodes"] == [1, 2]
    if version >= 7:
        assert orders["partitions"][7]["leader_epoch"] == 4


def test_partition_count_and_topic_identity_are_checked_even_without_invalidation(broker: _Broker) -> None:
    version = 12
    _cached(broker, version)
    rec = broker.metadata.topics["events"]
    # Partitions added through the store alone, without telling the cache: the image follows the store.
    broker.metadata.set_partitions("events", 5)
    for i in (3, 4):
        broker.partitions[("events", i)] = Partition("events", i, rec.topic_id, _Log(), 1)  # type: ignore[arg-type]
    assert _cached(broker, version) == _uncached(broker, version)
    decoded, _ = codec.decode(METADATA, version, _cached(broker, version))
    assert len(next(t for t in decoded["topics"] if t["name"] == "events")["partitions"]) == 5
    # Deleted and created again under the same name: a new record (and topic id), never the old entry.
    old_id = rec.topic_id
    broker.metadata.remove_topic("events")
    new = broker.metadata.add_topic("events", 2, {})
    assert new.topic_id != old_id
    for i in range(2):
        broker.partitions[("events", i)] = Partition("events", i, new.topic_id, _Log(), 1)  # type: ignore[arg-type]
    decoded, _ = codec.decode(METADATA, version, _cached(broker, version))
    events = next(t for t in decoded["topics"] if t["name"] == "events")
    assert events["topic_id"] == new.topic_id and len(events["partitions"]) == 2
    broker.delete_topic("orders")
    assert [t["name"] for t in codec.decode(METADATA, version, _cached(broker, version))[0]["topics"]] == ["events"]


def test_a_partition_not_yet_registered_is_answered_live_and_not_kept(broker: _Broker) -> None:
    rec = broker.add_topic("growing", 2)
    broker.partitions.pop(("growing", 1))
    broker.publisher.topic_changed("growing")  # as the broker says when it removes a partition
    decoded, _ = codec.decode(METADATA, 12, _cached(broker, 12))
    growing = next(t for t in decoded["topics"] if t["name"] == "growing")
    assert [p["error_code"] for p in growing["partitions"]] == [0, 5]  # LEADER_NOT_AVAILABLE
    broker.register(rec, 1)
    decoded, _ = codec.decode(METADATA, 12, _cached(broker, 12))
    growing = next(t for t in decoded["topics"] if t["name"] == "growing")
    assert [p["error_code"] for p in growing["partitions"]] == [0, 0]


def test_a_leader_on_an_unregistered_broker_is_not_available(broker: _Broker) -> None:
    _cached(broker, 12)
    p = broker.partition("events", 1)
    assert p is not None
    p.replicas = [1, 4]
    p.leader_id = 4  # broker 4 is not registered: Kafka answers LEADER_NOT_AVAILABLE, replica 4 offline
    assert _cached(broker, 12) == _uncached(broker, 12)
    decoded, _ = codec.decode(METADATA, 12, _cached(broker, 12))
    events = next(t for t in decoded["topics"] if t["name"] == "events")
    part = events["partitions"][1]
    assert (part["error_code"], part["leader_id"], part["offline_replicas"]) == (5, -1, [4])
    assert sorted(b["node_id"] for b in decoded["brokers"]) == [1, 2, 3]


def _reference(broker: _Broker, ctx: RequestContext, request: dict, visible: list[str], ops: dict[str, int] | None) -> bytes:
    """The handler's response with its topics replaced by dicts built here: ``visible`` (in the
    image's order) and, when asked for, their authorized operations as the test expects them."""
    version = ctx.version
    response = handle_metadata(ctx, request)
    image = broker.metadata_image()
    topics = []
    for name in (n for n in image.topics_by_name if n in visible):
        topic = topic_metadata(image.topics_by_name[name], image.brokers)
        if ops is not None:
            topic["topic_authorized_operations"] = ops[name]
        topics.append(topic)
    response["topics"] = topics
    return codec.encode(METADATA, version, response)


def _acl(principal: str, topic: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW
    )


DESCRIBE_BIT = 1 << AclOperation.DESCRIBE
READ_DESCRIBE_BITS = DESCRIBE_BIT | 1 << AclOperation.READ
# No authorizer: every operation a topic supports (Kafka's AclEntry.supportedOperations(TOPIC)).
EVERY_TOPIC_OPERATION = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])


@pytest.mark.parametrize("version", VERSIONS)
def test_operations_and_an_authorizer_that_hides_topics_are_answered_byte_identically(
    broker: _Broker, version: int
) -> None:
    wants_ops = version >= 8
    request = {**_all_topics(version), "include_topic_authorized_operations": wants_ops}
    # No authorizer: every topic, every operation (entries kept per operations value).
    everything = dict.fromkeys(["orders", "events"], EVERY_TOPIC_OPERATION) if wants_ops else None
    for _ in range(2):  # built, then served from the cache
        got = codec.encode(METADATA, version, handle_metadata(_ctx(broker, version), request))
        assert got == _reference(broker, _ctx(broker, version), request, ["orders", "events"], everything)
    # An authorizer: alice may describe events only (orders is left out), bob reads and describes both.
    authorizer = Authorizer(frozenset(), allow_if_no_acl=False)
    authorizer.create_acls(
        [_acl("User:alice", "events", AclOperation.DESCRIBE)]
        + [_acl("User:bob", t, op) for t in ("orders", "events") for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    )
    broker.authorizer = authorizer
    for principal, visible, bits in (("User:alice", ["events"], DESCRIBE_BIT), ("User:bob", ["orders", "events"], READ_DESCRIBE_BITS)):
        ops = dict.fromkeys(visible, bits) if wants_ops else None
        for _ in range(2):
            got = codec.encode(METADATA, version, handle_metadata(_ctx(broker, version, principal), request))
            assert got == _reference(broker, _ctx(broker, version, principal), request, visible, ops)
        named = {**request, "topics": [{"name": "events", "topic_id": uuid.UUID(int=0)}]}  # and by name
        got = codec.encode(METADATA, version, handle_metadata(_ctx(broker, version, principal), named))
        assert got == _reference(broker, _ctx(broker, version, principal), named, ["events"], ops and {"events": bits})
    # And the unfiltered answer is still every topic's, not a filtered one kept from before.
    broker.authorizer = None
    got = codec.encode(METADATA, version, handle_metadata(_ctx(broker, version), request))
    assert got == _reference(broker, _ctx(broker, version), request, ["orders", "events"], everything)


def test_the_kept_list_of_every_topic_follows_the_image_without_the_listener(broker: _Broker) -> None:
    """The list of all topics' entries is kept per image: a change the cache is never told of (its
    listener removed) is still answered, because it is a new image."""
    broker.publisher.listeners.remove(broker.metadata_cache.invalidate)
    for version in (0, 9, 12):
        assert _cached(broker, version) == _uncached(broker, version)
    p = broker.partition("orders", 3)
    assert p is not None
    p.leader_id = 3
    p.isr = [3]
    for version in (0, 9, 12):
        assert _cached(broker, version) == _uncached(broker, version)
    decoded, _ = codec.decode(METADATA, 12, _cached(broker, 12))
    orders = next(t for t in decoded["topics"] if t["name"] == "orders")
    assert (orders["partitions"][3]["leader_id"], orders["partitions"][3]["isr_nodes"]) == (3, [3])
    broker.add_topic("late", 4)  # a topic created after the list was kept
    broker.delete_topic("events")
    decoded, _ = codec.decode(METADATA, 12, _cached(broker, 12))
    assert sorted((t["name"], len(t["partitions"])) for t in decoded["topics"]) == [("late", 4), ("orders", 50)]
    assert _cached(broker, 12) == _uncached(broker, 12)


def test_a_broker_leaving_takes_its_leaders_offline_in_the_next_answer(broker: _Broker) -> None:
    p = broker.partition("events", 0)
    assert p is not None
    p.replicas = [2, 3]
    p.leader_id = 2
    before = _cached(broker, 12)
    # Broker 2 unregisters: a new broker set, the same topic images.
    broker.publisher.set_brokers(BrokerRegistration(n, "127.0.0.1", 9091 + n) for n in (1, 3))
    after = _cached(broker, 12)
    assert after != before and after == _uncached(broker, 12)
    decoded, _ = codec.decode(METADATA, 12, after)
    part = next(t for t in decoded["topics"] if t["name"] == "events")["partitions"][0]
    assert (part["error_code"], part["leader_id"], part["offline_replicas"]) == (5, -1, [2])
