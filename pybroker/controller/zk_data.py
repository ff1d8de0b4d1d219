"""Kafka's ZooKeeper layout (ZkData.scala of Kafka 3.x ZK mode): znode paths and their JSON, no I/O.

    /controller                                  ephemeral {"version":1,"brokerid":B,"timestamp":"ms"}
    /controller_epoch                            "E" (the epoch only grows; its znode version fences writes)
    /brokers/ids/<id>                            ephemeral broker registration (v5 JSON: host, port, endpoints, rack)
    /brokers/topics/<t>                          {"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{},
                                                  "removing_replicas":{},"topic_id":"..."}
    /brokers/topics/<t>/partitions/<p>/state     {"version":1,"controller_epoch":E,"leader":L,"leader_epoch":N,"isr":[..]}
    /admin/delete_topics/<t>                     a topic queued for deletion
    /admin/reassign_partitions                   {"version":1,"partitions":[{"topic","partition","replicas"}]}
    /isr_change_notification/isr_change_<seq>    {"version":1,"partitions":[{"topic","partition"}]}
    /config/topics/<t>                           {"version":1,"config":{...}}
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
CONFIG_TOPICS_PATH = "/config/topics"
# The persistent paths Kafka's KafkaZkClient.createTopLevelPaths makes at start-up.
# A broker asking the controller to move its leadership away before it stops (pybroker's, not Kafka's:
# Kafka's brokers send ControlledShutdown (API 7), which Kafka 4's protocol no longer has). One ephemeral
# child per broker, named after its id, holding {"broker_epoch": ...}; the controller deletes it when done.
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"
# Kafka's ProducerIdBlockZNode: {"version": 1, "broker": id, "block_start": "first", "block_end": "last"}.
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
# Admin requests a broker that is not the controller hands to the active controller (pybroker's, not
# Kafka's: Kafka 4's brokers forward ElectLeaders and the reassignment APIs to the controller over the
# wire, in an Envelope carrying the client's principal; here the broker that received the request has
# authorized it, and ZooKeeper carries it). One ephemeral sequential child per request, holding
# {"kind": ..., "request": {...}}; the controller adds "response" and the requester reads and deletes it.
FORWARDED_REQUESTS_PATH = "/admin/forwarded_requests"
FORWARDED_REQUEST_PREFIX = "request-"
PERSISTENT_PATHS = (
    BROKER_IDS_PATH, TOPICS_PATH, DELETE_TOPICS_PATH, ISR_CHANGE_NOTIFICATION_PATH, CONFIG_TOPICS_PATH,
    "/config/brokers", "/config/changes", CONTROLLED_SHUTDOWN_PATH,
    FORWARDED_REQUESTS_PATH,
)

NO_LEADER = -1  # LeaderAndIsr.NoLeader: the partition is offline
INITIAL_CONTROLLER_EPOCH = 0  # the first elected controller has epoch 1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _parse(data: bytes | None) -> dict:
    if not data:
        return {}
    parsed = json.loads(data.decode())
    return parsed if isinstance(parsed, dict) else {}


# -- /controller, /controller_epoch


def encode_controller(broker_id: int) -> bytes:
    return _json({"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))})


def decode_controller(data: bytes | None) -> int | None:
    broker_id = _parse(data).get("brokerid")
    return int(broker_id) if broker_id is not None else None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# -- /brokers/ids/<id>


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration: its id, the address clients reach (host, port), rack and endpoints."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[str, ...] = ()  # "LISTENER://host:port", as Kafka registers them
    listener_security_protocol_map: Mapping[str, str] = field(default_factory=dict)
    # The registration znode's czxid: Kafka's broker epoch (a re-registered broker has a new one).
    broker_epoch: int = -1

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of the named listener, or None if the broker has none by that name."""
        for text in self.endpoints:
            name, _, address = text.partition("://")
            if name == listener:
                host, _, port = address.rpartition(":")
                return host.strip("[]"), int(port)
        return None

    def encode(self) -> bytes:
        endpoints = list(self.endpoints) or [f"PLAINTEXT://{self.host}:{self.port}"]
        protocols = dict(self.listener_security_protocol_map) or {
            text.partition("://")[0]: "PLAINTEXT" for text in endpoints
        }
        body: dict[str, object] = {
            "version": 5,
            "host": self.host,
            "port": self.port,
            "jmx_port": -1,
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": endpoints,
            "listener_security_protocol_map": protocols,
            "features": {},
        }
        if self.rack is not None:
            body["rack"] = self.rack
        return _json(body)

    @classmethod
    def decode(cls, broker_id: int, data: bytes, broker_epoch: int = -1) -> BrokerInfo:
        body = _parse(data)
        return cls(
            broker_id=broker_id,
            host=str(body.get("host") or ""),
            port=int(body.get("port", -1)),
            rack=body.get("rack"),
            endpoints=tuple(body.get("endpoints") or ()),
            listener_security_protocol_map=dict(body.get("listener_security_protocol_map") or {}),
            broker_epoch=broker_epoch,
        )


# -- /brokers/topics/<t>


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas; during a reassignment also the replicas being added and removed (KIP-455)."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(frozen=True)
class TopicAssignment:
    topic: str
    topic_id: str | None
    partitions: Mapping[int, ReplicaAssignment]

    @property
    def topic_uuid(self) -> uuid.UUID | None:
        """The topic id as a UUID (the znode holds Kafka's Uuid.toString(): url-safe base64, no padding)."""
        if not self.topic_id:
            return None
        return uuid.UUID(bytes=base64.urlsafe_b64decode(self.topic_id + "=" * (-len(self.topic_id) % 4)))

    def encode(self) -> bytes:
        body: dict[str, object] = {
            "version": 2,
            "partitions": {str(p): list(a.replicas) for p, a in sorted(self.partitions.items())},
            "adding_replicas": {
                str(p): list(a.adding_replicas) for p, a in sorted(self.partitions.items()) if a.adding_replicas
            },
            "removing_replicas": {
                str(p): list(a.removing_replicas)
                for p, a in sorted(self.partitions.items())
                if a.removing_replicas
            },
        }
        if self.topic_id is not None:
            body["topic_id"] = self.topic_id
        return _json(body)

    @classmethod
    def decode(cls, topic: str, data: bytes | None) -> TopicAssignment:
        body = _parse(data)
        adding = body.get("adding_replicas") or {}
        removing = body.get("removing_replicas") or {}
        partitions = {
            int(p): ReplicaAssignment(
                tuple(int(r) for r in replicas),
                tuple(int(r) for r in adding.get(p, ())),
                tuple(int(r) for r in removing.get(p, ())),
            )
            for p, replicas in (body.get("partitions") or {}).items()
        }
        return cls(topic, body.get("topic_id"), partitions)

    def with_partitions(self, changes: Mapping[int, ReplicaAssignment]) -> TopicAssignment:
        return TopicAssignment(self.topic, self.topic_id, {**self.partitions, **changes})


# -- /brokers/topics/<t>/partitions/<p>/state


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's state znode. ``zk_version`` is the znode's version: Kafka's partition epoch in ZK
    mode; every write of the state is conditional on it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1

    def encode(self) -> bytes:
        return _json(
            {
                "version": 1,
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "controller_epoch": self.controller_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def decode(cls, data: bytes, zk_version: int) -> LeaderAndIsr:
        body = _parse(data)
        return cls(
            leader=int(body["leader"]),
            leader_epoch=int(body["leader_epoch"]),
            isr=tuple(int(r) for r in body.get("isr", ())),
            controller_epoch=int(body.get("controller_epoch", 0)),
            zk_version=zk_version,
        )

    def new_leader_and_isr(self, leader: int, isr: Iterable[int], controller_epoch: int) -> LeaderAndIsr:
        """The next state: the leader epoch grows by one (Kafka's LeaderAndIsr.newLeaderAndIsr)."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), controller_epoch, self.zk_version)


# -- notifications and admin requests


def encode_isr_change(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _json({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_isr_change(data: bytes | None) -> list[tuple[str, int]]:
    return [(str(e["topic"]), int(e["partition"])) for e in _parse(data).get("partitions", ())]


def encode_reassignment(assignment: Mapping[tuple[str, int], Iterable[int]]) -> bytes:
    return _json(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(assignment.items())
            ],
        }
    )


def decode_reassignment(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    return {
        (str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"])
        for e in _parse(data).get("partitions", ())
    }


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    return _json({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (_parse(data).get("config") or {}).items()}
