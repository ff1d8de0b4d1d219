"""kafka-python 3.0.x adapter."""

from __future__ import annotations

import time
from collections.abc import Callable

import kafka.errors as kerrors
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, OffsetTimestamp
from kafka.admin import OffsetSpec as KpOffsetSpec

from .base import (
    Acks,
    ClientError,
    Compression,
    ConsumedRecord,
    Delivery,
    ListedOffset,
    NotSupportedByClient,
    OffsetSpec,
    Record,
    Start,
    TopicDescription,
)
from .errors import kafka_error_name
from .security import ClientSecurity, kafka_python_kwargs

TIMEOUT_S = 30.0


def to_client_error(exc: BaseException) -> ClientError:
    errno = getattr(exc, "errno", None)
    if isinstance(exc, kerrors.KafkaTimeoutError):
        name = "REQUEST_TIMED_OUT"
    elif isinstance(errno, int):
        name = kafka_error_name(errno)
    else:
        name = "UNKNOWN"
    return ClientError(name, type(exc).__name__, str(exc))


class KafkaPythonClient:
    name = "kafka-python"
    security: ClientSecurity | None = None  # set by a scenario for a secured listener

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
        if any(value is None for record in records for _, value in record.headers):
            raise NotSupportedByClient(
                "kafka-python's send() accepts only (str, bytes) headers, no NULL header value"
            )
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            **kafka_python_kwargs(self.security),
            compression_type=None if compression == "none" else compression,
            enable_idempotence=idempotent,
            acks=-1 if acks == "all" else int(acks),
            linger_ms=5,
            # Only the broker (topic max.message.bytes) should refuse a big record.
            max_request_size=10_000_000,
            retries=0 if not idempotent else 5,
            request_timeout_ms=int(TIMEOUT_S * 1000),
        )
        try:
            futures = []
            for record in records:
                futures.append(
                    producer.send(
                        topic,
                        value=record.value,
                        key=record.key,
                        headers=list(record.headers) if record.headers else None,
                        partition=record.partition,
                        timestamp_ms=record.timestamp_ms,
                    )
                )
            producer.flush(TIMEOUT_S)
            deliveries = []
            for future in futures:
                try:
                    metadata = future.get(TIMEOUT_S)
                except kerrors.KafkaError as exc:
                    raise to_client_error(exc) from exc
                deliveries.append(Delivery(metadata.partition, metadata.offset, metadata.timestamp))
            return deliveries
        finally:
            producer.close(timeout=5)

    def produce_transactions(
        self,
        bootstrap: str,
        topic: str,
        transactional_id: str,
        transactions: list[tuple[list[Record], bool]],
    ) -> list[list[Delivery]]:
        """See ConfluentClient.produce_transactions."""
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            **kafka_python_kwargs(self.security),
            transactional_id=transactional_id,
            linger_ms=5,
            request_timeout_ms=int(TIMEOUT_S * 1000),
        )
        try:
            producer.init_transactions()
            out = []
            for records, commit in transactions:
                producer.begin_transaction()
                futures = [
                    producer.send(
                        topic,
                        value=record.value,
                        key=record.key,
                        headers=list(record.headers) if record.headers else None,
                        partition=record.partition,
                    )
                    for record in records
                ]
                producer.flush(TIMEOUT_S)
                deliveries = []
                for future in futures:
                    metadata = future.get(TIMEOUT_S)
                    deliveries.append(Delivery(metadata.partition, metadata.offset, metadata.timestamp))
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
                out.append(deliveries)
            return out
        except kerrors.KafkaError as exc:
            raise to_client_error(exc) from exc
        finally:
            producer.close(timeout=5)

    def consume_committed(
        self, bootstrap: str, topic: str, partition: int, *, start: Start, count: int, timeout_s: float = 30.0
    ) -> list[ConsumedRecord]:
        """``consume`` with isolation_level=read_committed."""
        return self.consume(
            bootstrap,
            topic,
            partition,
            start=start,
            count=count,
            timeout_s=timeout_s,
            isolation="read_committed",
        )

    def _consumer(self, bootstrap: str, isolation: str = "read_uncommitted") -> KafkaConsumer:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            **kafka_python_kwargs(self.security),
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation,
            allow_auto_create_topics=False,
            request_timeout_ms=int(TIMEOUT_S * 1000),
        )
        # kafka-python 3.0.12 does not hand allow_auto_create_topics to its ClusterMetadata (which
        # builds the Metadata requests and defaults to True), so apply the documented setting there.
        # Only the bootstrap (no-topics) Metadata request has been sent at this point.
        consumer._manager.cluster.config["allow_auto_create_topics"] = False  # noqa: SLF001
        return consumer

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
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            if start == "beginning":
                consumer.seek_to_beginning(tp)
            elif start == "end":
                consumer.seek_to_end(tp)
                consumer.position(tp)  # resolve "end" now, before anything else is produced
            else:
                consumer.seek(tp, start)
            out: list[ConsumedRecord] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                try:
                    batches = consumer.poll(timeout_ms=500, max_records=count - len(out))
                except kerrors.KafkaError as exc:
                    raise to_client_error(exc) from exc
                for msg in batches.get(tp, []):
                    out.append(
                        ConsumedRecord(
                            topic=msg.topic,
                            partition=msg.partition,
                            offset=msg.offset,
                            timestamp_ms=msg.timestamp,
                            timestamp_type="LogAppendTime" if msg.timestamp_type == 1 else "CreateTime",
                            key=msg.key,
                            value=msg.value,
                            headers=tuple((name, value) for name, value in msg.headers or ()),
                        )
                    )
            return out
        finally:
            consumer.close()

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        consumer = self._consumer(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            result = consumer.offsets_for_times({tp: timestamp_ms})[tp]
            return None if result is None else result.offset
        finally:
            consumer.close()

    # ---- admin -------------------------------------------------------------------------
    def _admin(self, bootstrap: str) -> KafkaAdminClient:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap,
            **kafka_python_kwargs(self.security),
            request_timeout_ms=int(TIMEOUT_S * 1000),
        )

    def _call(self, bootstrap: str, operation):  # noqa: ANN001, ANN202
        admin = self._admin(bootstrap)
        try:
            return operation(admin)
        except kerrors.KafkaError as exc:
            raise to_client_error(exc) from exc
        finally:
            admin.close()

    def create_topic(
        self, bootstrap: str, topic: str, *, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        spec = {
            topic: {"num_partitions": partitions, "replication_factor": 1, "configs": dict(configs or {})}
        }
        self._call(bootstrap, lambda admin: admin.create_topics(spec, timeout_ms=int(TIMEOUT_S * 1000)))

    def delete_topic(self, bootstrap: str, topic: str) -> None:
        self._call(bootstrap, lambda admin: admin.delete_topics([topic], timeout_ms=int(TIMEOUT_S * 1000)))

    def describe_configs(self, bootstrap: str, topic: str) -> dict[str, str]:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        result = self._call(bootstrap, lambda admin: admin.describe_configs([resource], config_filter="all"))
        entries = _only_value(_only_value(result))
        return {
            name: ("" if data.get("value") is None else str(data["value"])) for name, data in entries.items()
        }

    def alter_configs(self, bootstrap: str, topic: str, configs: dict[str, str]) -> None:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(configs))
        result = self._call(bootstrap, lambda admin: admin.alter_configs([resource], incremental=True))
        outcome = _only_value(_only_value(result))
        if isinstance(outcome, BaseException):
            raise to_client_error(outcome)

    def create_partitions(self, bootstrap: str, topic: str, total: int) -> None:
        self._call(
            bootstrap, lambda admin: admin.create_partitions({topic: total}, timeout_ms=int(TIMEOUT_S * 1000))
        )

    def list_offsets(self, bootstrap: str, topic: str, partition: int, spec: OffsetSpec) -> ListedOffset:
        named = {
            "earliest": KpOffsetSpec.EARLIEST,
            "latest": KpOffsetSpec.LATEST,
            "max-timestamp": KpOffsetSpec.MAX_TIMESTAMP,
        }
        wire_spec = named[spec] if isinstance(spec, str) else OffsetTimestamp(spec)
        tp = TopicPartition(topic, partition)
        result = self._call(bootstrap, lambda admin: admin.list_partition_offsets({tp: wire_spec}))
        info = result[tp]
        return ListedOffset(info.offset, info.timestamp)

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
        tp = TopicPartition(topic, partition)
        result = self._call(bootstrap, lambda admin: admin.delete_records({tp: before_offset}))
        info = result[tp]
        return info["low_watermark"] if isinstance(info, dict) else info.low_watermark

    def describe_topic(self, bootstrap: str, topic: str) -> TopicDescription:
        (description,) = self._call(bootstrap, lambda admin: admin.describe_topics([topic]))
        error_code = description.get("error_code", 0)
        if error_code:
            raise ClientError(kafka_error_name(error_code), "describe_topics error_code", topic)
        return TopicDescription(description["name"], len(description["partitions"]))

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
    ) -> None:
        """subscribe() as ``group_id``; after each record commit offset+1 synchronously (when
        ``commit_each``), then call ``on_record(partition, offset, value)``; True from it, or
        ``should_stop()``, ends the loop, and the consumer closes (leaving the group).  Every change
        of the assignment is reported to ``on_assign`` (sorted partitions)."""
        from kafka.structs import OffsetAndMetadata

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            **kafka_python_kwargs(self.security),
            group_id=group_id,
            group_instance_id=instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=max(session_timeout_ms // 6, 100),
            request_timeout_ms=int(TIMEOUT_S * 1000),
        )
        assigned: list[int] | None = None
        try:
            # The consumer learns the topic's partitions before it first joins (a blocking Metadata
            # request). Otherwise kafka-python 3.0.12 may join first, assign nothing as the leader
            # ("No partition metadata for topic"), rejoin once its metadata names the topic, and if
            # that rejoin's SyncGroup answer comes after a poll() timeout it drops the answer (the
            # metadata snapshot now matches, so need_rejoin() is False and the finished join is
            # never completed): no assignment and no heartbeats, and the coordinator evicts the
            # member after session_timeout_ms.
            try:
                consumer.partitions_for_topic(topic)
            except kerrors.KafkaError:
                pass  # a topic it may not describe, or not there yet: it joins as it would have
            while not should_stop():
                batches = consumer.poll(timeout_ms=200)
                now = sorted(tp.partition for tp in consumer.assignment())
                if now != assigned:
                    assigned = now
                    on_assign(now)
                for tp, messages in batches.items():
                    for msg in messages:
                        if commit_each:
                            try:
                                consumer.commit({tp: OffsetAndMetadata(msg.offset + 1, "", -1)})
                            except kerrors.CommitFailedError:
                                break  # rebalanced meanwhile: the new owner gets this record again
                        if on_record(msg.partition, msg.offset, msg.value):
                            return
        finally:
            consumer.close()


def _only_value(mapping: dict):  # noqa: ANN202
    (value,) = mapping.values()
    return value
