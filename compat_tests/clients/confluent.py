"""confluent-kafka (librdkafka) adapter."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from confluent_kafka.admin import (
    OffsetSpec as RdOffsetSpec,
)

from .base import (
    Acks,
    ClientError,
    Compression,
    ConsumedRecord,
    Delivery,
    ListedOffset,
    OffsetSpec,
    Record,
    Start,
    TopicDescription,
)
from .errors import kafka_error_name
from .security import ClientSecurity, librdkafka_config

# librdkafka reports broker errors with the Kafka code and local ones with negative codes.
_LOCAL_NAMES = {
    KafkaError._UNKNOWN_TOPIC: "UNKNOWN_TOPIC_OR_PARTITION",
    KafkaError._UNKNOWN_PARTITION: "UNKNOWN_TOPIC_OR_PARTITION",
}
TIMEOUT_S = 30.0


def _group_settings(
    group_protocol: str, session_timeout_ms: int, assignor: str | None, remote_assignor: str | None
) -> dict[str, object]:
    """The group settings of a classic member, or of a KIP-848 member (librdkafka rejects the
    classic ones with group.protocol=consumer: the broker owns them)."""
    if group_protocol == "consumer":
        settings: dict[str, object] = {"group.protocol": "consumer"}
        if remote_assignor is not None:
            settings["group.remote.assignor"] = remote_assignor
        return settings
    settings = {
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(session_timeout_ms // 6, 100),
    }
    if assignor is not None:
        settings["partition.assignment.strategy"] = assignor
    return settings


def to_client_error(error: KafkaError) -> ClientError:
    code = error.code()
    name = _LOCAL_NAMES.get(code) or (kafka_error_name(code) if code >= 0 else error.name())
    return ClientError(name, f"KafkaError.{error.name()}", error.str())


def _raise_from(exc: KafkaException) -> ClientError:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is None:
        return ClientError("UNKNOWN", type(exc).__name__, str(exc))
    return to_client_error(error)



# A group coordinator loading or moving: what Java's admin retries and librdkafka hands back.
_COORDINATOR_MOVING = frozenset(
    {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR}
)

class ConfluentClient:
    name = "confluent"
    security: ClientSecurity | None = None  # set by a scenario for a secured listener

    # ---- producer / consumer -------------------------------------------------------------
    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: list[Record],
        *,
        compression: Compression = "none",
        idempotent: bool = False,
        acks: Acks = "all",
    ) -> list[Delivery]:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                **librdkafka_config(self.security),
                "compression.type": compression,
                "enable.idempotence": idempotent,
                "acks": "-1" if acks == "all" else acks,
                "linger.ms": 5,
                # Large enough that only the broker (topic max.message.bytes) refuses big records.
                "message.max.bytes": 10_000_000,
                "message.timeout.ms": int(TIMEOUT_S * 1000),
            }
        )
        results: list[Delivery | ClientError | None] = [None] * len(records)

        def on_delivery_for(index: int):  # noqa: ANN202 - librdkafka callback
            def on_delivery(err: KafkaError | None, msg) -> None:  # noqa: ANN001
                if err is not None:
                    results[index] = to_client_error(err)
                else:
                    results[index] = Delivery(msg.partition(), msg.offset(), msg.timestamp()[1])

            return on_delivery

        for index, record in enumerate(records):
            kwargs: dict = {"value": record.value, "key": record.key, "on_delivery": on_delivery_for(index)}
            if record.headers:
                kwargs["headers"] = list(record.headers)
            if record.timestamp_ms is not None:
                kwargs["timestamp"] = record.timestamp_ms
            if record.partition is not None:
                kwargs["partition"] = record.partition
            producer.produce(topic, **kwargs)
            producer.poll(0)
        remaining = producer.flush(TIMEOUT_S)
        if remaining:
            raise ClientError("REQUEST_TIMED_OUT", "flush", f"{remaining} records unacknowledged")
        for result in results:
            if isinstance(result, ClientError):
                raise result
        return [r for r in results if isinstance(r, Delivery)]

    # ---- transactions ----------------------------------------------------------------------------
    def produce_transactions(
        self,
        bootstrap: str,
        topic: str,
        transactional_id: str,
        transactions: list[tuple[list[Record], bool]],
    ) -> list[list[Delivery]]:
        """init_transactions(), then per (records, commit): begin, send, commit or abort.
        Returns each transaction's deliveries (offsets of aborted records included)."""
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                **librdkafka_config(self.security),
                "transactional.id": transactional_id,
                "linger.ms": 5,
                "message.timeout.ms": int(TIMEOUT_S * 1000),
            }
        )
        try:
            producer.init_transactions(TIMEOUT_S)
            out: list[list[Delivery]] = []
            for records, commit in transactions:
                producer.begin_transaction()
                results: list[Delivery | ClientError | None] = [None] * len(records)

                def on_delivery_for(index: int, results=results):  # noqa: ANN202 - librdkafka callback
                    def on_delivery(err: KafkaError | None, msg) -> None:  # noqa: ANN001
                        results[index] = (
                            to_client_error(err)
                            if err is not None
                            else Delivery(msg.partition(), msg.offset(), msg.timestamp()[1])
                        )

                    return on_delivery

                for index, record in enumerate(records):
                    kwargs: dict = {
                        "value": record.value,
                        "key": record.key,
                        "on_delivery": on_delivery_for(index),
                    }
                    if record.headers:
                        kwargs["headers"] = list(record.headers)
                    if record.partition is not None:
                        kwargs["partition"] = record.partition
                    producer.produce(topic, **kwargs)
                producer.flush(TIMEOUT_S)
                if commit:
                    producer.commit_transaction(TIMEOUT_S)
                else:
                    producer.abort_transaction(TIMEOUT_S)
                for result in results:
                    if isinstance(result, ClientError):
                        raise result
                out.append([r for r in results if isinstance(r, Delivery)])
            return out
        except KafkaException as exc:
            raise _raise_from(exc) from exc

    def consume_committed(
        self, bootstrap: str, topic: str, partition: int, *, start: Start, count: int, timeout_s: float = 30.0
    ) -> list[ConsumedRecord]:
        """``consume`` with isolation.level=read_committed."""
        return self.consume(
            bootstrap,
            topic,
            partition,
            start=start,
            count=count,
            timeout_s=timeout_s,
            isolation="read_committed",
        )

    def _consumer(self, bootstrap: str, isolation: str = "read_uncommitted") -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                **librdkafka_config(self.security),
                "group.id": f"compat-{uuid.uuid4().hex}",  # required by the API; never joined (assign only)
                "enable.auto.commit": False,
                "allow.auto.create.topics": False,
                "enable.partition.eof": False,
                "isolation.level": isolation,
            }
        )

    def consume(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        *,
        start: Start,
        count: int,
        timeout_s: float = 30.0,
        isolation: str = "read_uncommitted",
    ) -> list[ConsumedRecord]:
        consumer = self._consumer(bootstrap, isolation)
        try:
            offset = OFFSET_BEGINNING if start == "beginning" else OFFSET_END if start == "end" else start
            consumer.assign([TopicPartition(topic, partition, offset)])
            out: list[ConsumedRecord] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
                if msg is None:
                    continue
                if msg.error():
                    error = to_client_error(msg.error())
                    if error.error == "UNKNOWN_TOPIC_OR_PARTITION":
                        raise error
                    continue  # transient (e.g. partition EOF / broker transport) — keep polling
                ts_type, ts = msg.timestamp()
                out.append(
                    ConsumedRecord(
                        topic=msg.topic(),
                        partition=msg.partition(),
                        offset=msg.offset(),
                        timestamp_ms=ts,
                        timestamp_type="LogAppendTime"
                        if ts_type == TIMESTAMP_LOG_APPEND_TIME
                        else "CreateTime",
                        key=msg.key(),
                        value=msg.value(),
                        headers=tuple(msg.headers() or ()),
                    )
                )
            return out
        finally:
            consumer.close()

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        consumer = self._consumer(bootstrap)
        try:
            (result,) = consumer.offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], TIMEOUT_S
            )
            if result.error:
                raise to_client_error(result.error)
            return None if result.offset < 0 else result.offset
        finally:
            consumer.close()

    # ---- admin -------------------------------------------------------------------------
    def _admin(self, bootstrap: str) -> AdminClient:
        return AdminClient({"bootstrap.servers": bootstrap, **librdkafka_config(self.security)})

    def _call(self, bootstrap: str, operation) -> list:  # noqa: ANN001
        # The AdminClient must stay referenced until its futures resolve: dropping it destroys the
        # handle and fails them with _DESTROY.
        admin = self._admin(bootstrap)
        futures = operation(admin)
        try:
            return [future.result(TIMEOUT_S) for future in futures.values()]
        except KafkaException as exc:
            raise _raise_from(exc) from exc

    def create_topic(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = 1,
        configs: dict[str, str] | None = None,
        replication_factor: int = 1,
    ) -> None:
        """``replication_factor=-1``: the broker's default.replication.factor (the compat fixtures'
        topics on a cluster)."""
        new_topic = NewTopic(
            topic, num_partitions=partitions, replication_factor=replication_factor, config=dict(configs or {})
        )
        self._call(bootstrap, lambda admin: admin.create_topics([new_topic], operation_timeout=TIMEOUT_S))

    def delete_topic(self, bootstrap: str, topic: str) -> None:
        self._call(bootstrap, lambda admin: admin.delete_topics([topic], operation_timeout=TIMEOUT_S))

    def describe_configs(self, bootstrap: str, topic: str) -> dict[str, str]:
        (entries,) = self._call(
            bootstrap, lambda admin: admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        )
        return {name: entry.value or "" for name, entry in entries.items()}

    def alter_configs(self, bootstrap: str, topic: str, configs: dict[str, str]) -> None:
        entries = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        self._call(bootstrap, lambda admin: admin.incremental_alter_configs([resource]))

    def create_partitions(self, bootstrap: str, topic: str, total: int) -> None:
        self._call(
            bootstrap,
            lambda admin: admin.create_partitions([NewPartitions(topic, total)], operation_timeout=TIMEOUT_S),
        )

    def list_offsets(self, bootstrap: str, topic: str, partition: int, spec: OffsetSpec) -> ListedOffset:
        if spec == "earliest":
            rd_spec = RdOffsetSpec.earliest()
        elif spec == "latest":
            rd_spec = RdOffsetSpec.latest()
        elif spec == "max-timestamp":
            rd_spec = RdOffsetSpec.max_timestamp()
        else:
            rd_spec = RdOffsetSpec.for_timestamp(spec)
        (info,) = self._call(
            bootstrap, lambda admin: admin.list_offsets({TopicPartition(topic, partition): rd_spec})
        )
        return ListedOffset(info.offset, info.timestamp)

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
        (deleted,) = self._call(
            bootstrap, lambda admin: admin.delete_records([TopicPartition(topic, partition, before_offset)])
        )
        return deleted.low_watermark

    def describe_topic(self, bootstrap: str, topic: str) -> TopicDescription:
        (description,) = self._call(bootstrap, lambda admin: admin.describe_topics(TopicCollection([topic])))
        return TopicDescription(description.name, len(description.partitions))

    # ---- consumer groups -----------------------------------------------------------------------
    def group_consume(
        self,
        bootstrap: str,
        topic: str,
        group_id: str,
        *,
        on_assign: Callable[[list[int]], None],
        on_record: Callable[[int, int, bytes | None], bool],
        should_stop: Callable[[], bool],
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        commit_each: bool = True,
        group_protocol: str = "classic",
        remote_assignor: str | None = None,
    ) -> None:
        """See KafkaPythonClient.group_consume.  ``group_protocol="consumer"``: a KIP-848 member
        (the broker owns session timeout, heartbeat interval and assignor; ``remote_assignor`` is
        ``group.remote.assignor``)."""
        settings = {
            "bootstrap.servers": bootstrap,
            **librdkafka_config(self.security),
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **_group_settings(group_protocol, session_timeout_ms, None, remote_assignor),
        }
        if instance_id is not None:
            settings["group.instance.id"] = instance_id
        consumer = Consumer(settings)
        assigned: list[int] | None = None
        try:
            consumer.subscribe([topic])
            while not should_stop():
                msg = consumer.poll(0.2)
                now = sorted(tp.partition for tp in consumer.assignment())
                if now != assigned:
                    assigned = now
                    on_assign(now)
                if msg is None or msg.error():
                    continue
                if commit_each:
                    try:
                        consumer.commit(
                            offsets=[TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)],
                            asynchronous=False,
                        )
                    except KafkaException:
                        continue  # rebalanced meanwhile: the new owner gets this record again
                if on_record(msg.partition(), msg.offset(), msg.value()):
                    return
        finally:
            consumer.close()

    def group_consume_events(
        self,
        bootstrap: str,
        topic: str,
        group_id: str,
        *,
        on_event: Callable[[dict], None],
        on_record: Callable[[int, int, bytes | None], bool],
        should_stop: Callable[[], bool],
        on_assign: Callable[[list[int]], None] = lambda partitions: None,
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        commit_each: bool = True,
        assignor: str = "range",
        properties: dict | None = None,
        group_protocol: str = "classic",
        remote_assignor: str | None = None,
    ) -> None:
        """Like group_consume, plus every rebalance callback as ``on_event({"event": "assigned" |
        "revoked" | "lost", "partitions": changed, "assignment": whole after the change,
        "generation": None})`` (librdkafka does not expose the generation); ``assignor`` is the
        ``partition.assignment.strategy`` (range, roundrobin, cooperative-sticky)."""
        settings = {
            "bootstrap.servers": bootstrap,
            **librdkafka_config(self.security),
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **_group_settings(group_protocol, session_timeout_ms, assignor, remote_assignor),
            **(properties or {}),
        }
        if instance_id is not None:
            settings["group.instance.id"] = instance_id
        consumer = Consumer(settings)
        owned: set[int] = set()
        reported: list[int] | None = None

        def callback(kind: str):  # noqa: ANN202 - librdkafka rebalance callback factory
            def handle(_consumer, partitions) -> None:  # noqa: ANN001
                changed = sorted(tp.partition for tp in partitions)
                if kind == "assigned":
                    owned.update(changed)
                elif assignor == "cooperative-sticky" or group_protocol == "consumer":
                    owned.difference_update(changed)
                else:
                    owned.clear()  # eager: every partition goes back
                on_event(
                    {"event": kind, "partitions": changed, "assignment": sorted(owned), "generation": None}
                )

            return handle

        try:
            consumer.subscribe(
                [topic],
                on_assign=callback("assigned"),
                on_revoke=callback("revoked"),
                on_lost=callback("lost"),
            )
            while not should_stop():
                msg = consumer.poll(0.2)
                if sorted(owned) != reported:
                    reported = sorted(owned)
                    on_assign(reported)
                if msg is None or msg.error():
                    continue
                if commit_each:
                    try:
                        consumer.commit(
                            offsets=[TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)],
                            asynchronous=False,
                        )
                    except KafkaException:
                        # Rebalanced meanwhile: if the partition stays ours (cooperative), fetch the
                        # record again; otherwise the new owner starts from the committed offset.
                        if msg.partition() in owned:
                            consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
                        continue
                if on_record(msg.partition(), msg.offset(), msg.value()):
                    return
        finally:
            consumer.close()

    def list_groups(self, bootstrap: str, states: list[str] | None = None) -> dict[str, str]:
        """group id -> state, through AdminClient.list_consumer_groups (ListGroups)."""
        from confluent_kafka import ConsumerGroupState

        kwargs = {}
        if states:
            kwargs["states"] = {ConsumerGroupState[s.upper()] for s in states}
        admin = self._admin(bootstrap)
        result = admin.list_consumer_groups(request_timeout=TIMEOUT_S, **kwargs).result(TIMEOUT_S)
        return {g.group_id: g.state.name for g in result.valid}

    def list_group_types(self, bootstrap: str) -> dict[str, str]:
        """group id -> type (CLASSIC, CONSUMER), through list_consumer_groups (ListGroups v5)."""
        admin = self._admin(bootstrap)
        result = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        return {g.group_id: g.type.name for g in result.valid}

    def describe_group(self, bootstrap: str, group_id: str) -> dict:
        """State, protocol and members (with their assigned partitions) via describe_consumer_groups."""
        admin = self._admin(bootstrap)
        (future,) = admin.describe_consumer_groups([group_id], request_timeout=TIMEOUT_S).values()
        try:
            d = future.result(TIMEOUT_S)
        except KafkaException as exc:
            raise _raise_from(exc) from exc
        return {
            "state": d.state.name,
            "protocol": d.partition_assignor,
            "type": d.type.name,  # CONSUMER (KIP-848) or CLASSIC
            "members": {
                m.member_id: {
                    "client_id": m.client_id,
                    "host": m.host,
                    "instance_id": m.group_instance_id,
                    "partitions": sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions),
                }
                for m in d.members
            },
        }

    def delete_group(self, bootstrap: str, group_id: str) -> None:
        self._call(
            bootstrap, lambda admin: admin.delete_consumer_groups([group_id], request_timeout=TIMEOUT_S)
        )

    def committed_offsets(self, bootstrap: str, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group, via list_consumer_group_offsets (OffsetFetch)."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        admin = self._admin(bootstrap)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)]).values()
            try:
                result = future.result(TIMEOUT_S)
                break
            except KafkaException as exc:
                # librdkafka hands a coordinator's retriable answer (COORDINATOR_LOAD_IN_PROGRESS right
                # after a restart) to the application, where Java's admin retries it: so does this one.
                if exc.args[0].code() in _COORDINATOR_MOVING and time.monotonic() < deadline:
                    time.sleep(0.1)  # the admin's retry backoff
                    continue
                raise _raise_from(exc) from exc
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}
