"""aiokafka 0.14 adapter: each call runs the asyncio API to completion with ``asyncio.run``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

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
from .security import ClientSecurity, aiokafka_kwargs

TIMEOUT_S = 30.0
T = TypeVar("T")


def to_client_error(exc: BaseException) -> ClientError:
    errno = getattr(exc, "errno", None)
    if isinstance(exc, aerrors.KafkaTimeoutError):
        name = "REQUEST_TIMED_OUT"
    elif isinstance(errno, int):
        name = kafka_error_name(errno)
    else:
        name = "UNKNOWN"
    return ClientError(name, type(exc).__name__, str(exc))


def _check(error_code: int, what: str) -> None:
    if error_code:
        raise ClientError(kafka_error_name(error_code), f"{what} error_code", str(error_code))


class AiokafkaClient:
    name = "aiokafka"
    security: ClientSecurity | None = None  # set by a scenario for a secured listener
    # aiokafka's Metadata requests always set allow_auto_topic_creation=true; there is no switch.
    consumer_can_disable_auto_create = False

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
        async def run() -> list[Delivery]:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                compression_type=None if compression == "none" else compression,
                enable_idempotence=idempotent,
                acks="all" if acks == "all" else int(acks),
                linger_ms=5,
                max_request_size=10_000_000,
                request_timeout_ms=int(TIMEOUT_S * 1000),
            )
            await producer.start()
            try:
                futures = [
                    await producer.send(
                        topic,
                        value=record.value,
                        key=record.key,
                        partition=record.partition,
                        timestamp_ms=record.timestamp_ms,
                        headers=list(record.headers) if record.headers else None,
                    )
                    for record in records
                ]
                deliveries = []
                for future in futures:
                    metadata = await future
                    deliveries.append(Delivery(metadata.partition, metadata.offset, metadata.timestamp))
                return deliveries
            finally:
                await producer.stop()

        return _run(run)

    def produce_transactions(
        self,
        bootstrap: str,
        topic: str,
        transactional_id: str,
        transactions: list[tuple[list[Record], bool]],
    ) -> list[list[Delivery]]:
        """See ConfluentClient.produce_transactions."""

        async def run() -> list[list[Delivery]]:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                transactional_id=transactional_id,
                linger_ms=5,
                request_timeout_ms=int(TIMEOUT_S * 1000),
            )
            await producer.start()  # InitProducerId with the transactional id
            try:
                out = []
                for records, commit in transactions:
                    await producer.begin_transaction()
                    futures = [
                        await producer.send(
                            topic,
                            value=record.value,
                            key=record.key,
                            partition=record.partition,
                            headers=list(record.headers) if record.headers else None,
                        )
                        for record in records
                    ]
                    deliveries = []
                    for future in futures:
                        metadata = await future
                        deliveries.append(Delivery(metadata.partition, metadata.offset, metadata.timestamp))
                    if commit:
                        await producer.commit_transaction()
                    else:
                        await producer.abort_transaction()
                    out.append(deliveries)
                return out
            finally:
                await producer.stop()

        return _run(run)

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
        async def run() -> list[ConsumedRecord]:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                group_id=None,
                enable_auto_commit=False,
                isolation_level=isolation,
            )
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                if partition not in (consumer.partitions_for_topic(topic) or ()):
                    await consumer._client.force_metadata_update()  # noqa: SLF001 - learn a new topic now
                consumer.assign([tp])
                if start == "beginning":
                    await consumer.seek_to_beginning(tp)
                elif start == "end":
                    await consumer.seek_to_end(tp)
                    await consumer.position(tp)
                else:
                    consumer.seek(tp, start)
                out: list[ConsumedRecord] = []
                deadline = time.monotonic() + timeout_s
                while len(out) < count and time.monotonic() < deadline:
                    batches = await consumer.getmany(tp, timeout_ms=500, max_records=count - len(out))
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
                await consumer.stop()

        return _run(run)

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        async def run() -> int | None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                group_id=None,
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                result = (await consumer.offsets_for_times({tp: timestamp_ms}))[tp]
                return None if result is None else result.offset
            finally:
                await consumer.stop()

        return _run(run)

    # ---- admin -------------------------------------------------------------------------
    def _admin_call(self, bootstrap: str, operation: Callable[[AIOKafkaAdminClient], Awaitable[T]]) -> T:
        async def run() -> T:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                request_timeout_ms=int(TIMEOUT_S * 1000),
            )
            await admin.start()
            try:
                return await operation(admin)
            finally:
                await admin.close()

        return _run(run)

    def create_topic(
        self, bootstrap: str, topic: str, *, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        new_topic = NewTopic(topic, partitions, 1, topic_configs=dict(configs or {}))
        response = self._admin_call(
            bootstrap, lambda admin: admin.create_topics([new_topic], timeout_ms=int(TIMEOUT_S * 1000))
        )
        for entry in response.topic_errors:
            _check(entry[1], "CreateTopics")

    def delete_topic(self, bootstrap: str, topic: str) -> None:
        response = self._admin_call(
            bootstrap, lambda admin: admin.delete_topics([topic], timeout_ms=int(TIMEOUT_S * 1000))
        )
        for entry in response.topic_error_codes:
            _check(entry[1], "DeleteTopics")

    def describe_configs(self, bootstrap: str, topic: str) -> dict[str, str]:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        (response,) = self._admin_call(bootstrap, lambda admin: admin.describe_configs([resource]))
        (resource_result,) = response.resources
        error_code, _message, _type, _name, entries = resource_result[:5]
        _check(error_code, "DescribeConfigs")
        return {entry[0]: "" if entry[1] is None else entry[1] for entry in entries}

    def alter_configs(self, bootstrap: str, topic: str, configs: dict[str, str]) -> None:
        # aiokafka only has the non-incremental AlterConfigs, which resets every config it is not
        # given; "set these, keep the rest" is not expressible without racing a describe.
        raise NotSupportedByClient("aiokafka has only the non-incremental AlterConfigs API")

    def create_partitions(self, bootstrap: str, topic: str, total: int) -> None:
        request = {topic: NewPartitions(total)}
        response = self._admin_call(
            bootstrap, lambda admin: admin.create_partitions(request, timeout_ms=int(TIMEOUT_S * 1000))
        )
        for entry in response.topic_errors:
            _check(entry[1], "CreatePartitions")

    def list_offsets(self, bootstrap: str, topic: str, partition: int, spec: OffsetSpec) -> ListedOffset:
        if spec == "max-timestamp":
            raise NotSupportedByClient("aiokafka has no max-timestamp offset spec (ListOffsets v7)")

        async def run() -> ListedOffset:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                group_id=None,
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                if spec == "earliest":
                    return ListedOffset((await consumer.beginning_offsets([tp]))[tp], -1)
                if spec == "latest":
                    return ListedOffset((await consumer.end_offsets([tp]))[tp], -1)
                found = (await consumer.offsets_for_times({tp: spec}))[tp]
                return ListedOffset(-1, -1) if found is None else ListedOffset(found.offset, found.timestamp)
            finally:
                await consumer.stop()

        return _run(run)

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
        tp = TopicPartition(topic, partition)
        result = self._admin_call(
            bootstrap, lambda admin: admin.delete_records({tp: RecordsToDelete(before_offset)})
        )
        return result[tp]

    def describe_topic(self, bootstrap: str, topic: str) -> TopicDescription:
        (description,) = self._admin_call(bootstrap, lambda admin: admin.describe_topics([topic]))
        _check(description["error_code"], "Metadata")
        return TopicDescription(description["topic"], len(description["partitions"]))

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
        """See KafkaPythonClient.group_consume.

        A ConsumerRebalanceListener makes it exactly-once through rebalances: getmany() hands out
        records fetched before a background rebalance revoked their partition, so the listener's
        on_partitions_revoked (which aiokafka awaits before rejoining) waits for the record being
        processed, then bumps ``revocations``; the loop drops the rest of any batch fetched before
        that, and the partition's next owner (or this member again) resumes from the commit."""

        async def run() -> None:
            processing = asyncio.Lock()
            revocations = 0

            class Listener(ConsumerRebalanceListener):
                async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                    nonlocal revocations
                    async with processing:
                        revocations += 1

                async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                    pass

            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                **aiokafka_kwargs(self.security),
                group_id=group_id,
                group_instance_id=instance_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=max(session_timeout_ms // 6, 100),
                request_timeout_ms=int(TIMEOUT_S * 1000),
            )
            consumer.subscribe([topic], listener=Listener())
            await consumer.start()
            assigned: list[int] | None = None
            try:
                while not should_stop():
                    fetched_in = revocations
                    batches = await consumer.getmany(timeout_ms=200)
                    now = sorted(tp.partition for tp in consumer.assignment())
                    if now != assigned:
                        assigned = now
                        on_assign(now)
                    for tp, messages in batches.items():
                        for msg in messages:
                            async with processing:
                                if revocations != fetched_in:
                                    break  # fetched before a rebalance: refetched from the commit
                                if commit_each:
                                    try:
                                        await consumer.commit({tp: msg.offset + 1})
                                    except (aerrors.CommitFailedError, aerrors.IllegalStateError):
                                        break  # rebalanced meanwhile: the new owner gets this record again
                                if on_record(msg.partition, msg.offset, msg.value):
                                    return
            finally:
                await consumer.stop()

        _run(run)


def _run(factory: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(factory())  # type: ignore[arg-type]
    except aerrors.KafkaError as exc:
        raise to_client_error(exc) from exc
