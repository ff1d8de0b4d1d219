"""The seeded event data set, the generator that produces it, and the exact results the jobs must compute.

Every event is a JSON object ``{"event_id", "user", "kind", "amount", "ts"}``; ``ts`` (milliseconds) is
also the record's CreateTime timestamp, and each record carries a ``source`` header. Partitions are
chosen by the generator (``event_id % partitions``), so offsets are known in advance too.

    python -m spark_examples.events --bootstrap 127.0.0.1:9092 --topic events --count 2000
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from spark_examples.common import add_bootstrap_argument

KINDS = ("click", "view", "purchase")
SOURCES = ("web", "mobile")
BASE_TS_MS = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)
SPAN_MS = 10 * 60 * 1000  # events spread over ten minutes of event time
WINDOW_MS = 60 * 1000
# One event far past the data set moves the watermark beyond every window, so append mode emits them all.
FLUSH_KIND = "_flush"
FLUSH_TS_MS = BASE_TS_MS + 3 * 60 * 60 * 1000


@dataclass(frozen=True)
class Event:
    event_id: int
    user: str
    kind: str
    amount: int  # cents: integer sums do not depend on the order Spark adds them in
    ts: int
    source: str
    partition: int

    def value(self) -> bytes:
        return json.dumps(
            {
                "event_id": self.event_id,
                "user": self.user,
                "kind": self.kind,
                "amount": self.amount,
                "ts": self.ts,
            }
        ).encode()


def generate(count: int, partitions: int, seed: int = 42) -> list[Event]:
    """The data set: ``count`` events with non-decreasing ``ts`` per partition, then one flush event."""
    rng = random.Random(seed)
    times = sorted(BASE_TS_MS + rng.randrange(SPAN_MS) for _ in range(count))
    events = [
        Event(
            event_id=i,
            user=f"user-{rng.randrange(20)}",
            kind=rng.choice(KINDS),
            amount=rng.randrange(1, 10_000),
            ts=times[i],
            source=rng.choice(SOURCES),
            partition=i % partitions,
        )
        for i in range(count)
    ]
    events.append(Event(count, "user-flush", FLUSH_KIND, 0, FLUSH_TS_MS, "web", count % partitions))
    return events


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # The events carry 2024 timestamps (event time): with the default log.retention.ms (7 days) a broker's
    # retention check deletes them as soon as it runs (Apache Kafka's first check is 30 s after start-up),
    # and a reader of offset 10 then gets OFFSET_OUT_OF_RANGE.  Keep them.
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=1, config={"retention.ms": "-1"})
    futures = admin.create_topics([new_topic])
    futures[topic].result(30)


def produce(bootstrap: str, topic: str, events: list[Event], extra_config: dict | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **(extra_config or {})})
    for event in events:
        producer.produce(
            topic,
            key=event.user.encode(),
            value=event.value(),
            partition=event.partition,
            timestamp=event.ts,
            headers=[("source", event.source.encode())],
        )
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} events were not delivered to {topic}")


def offsets_by_partition(events: list[Event]) -> dict[int, list[Event]]:
    """Each partition's events in offset order (index = offset)."""
    by_partition: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        by_partition[event.partition].append(event)
    return by_partition


def window_start_iso(ts_ms: int) -> str:
    start = ts_ms - ts_ms % WINDOW_MS
    return datetime.fromtimestamp(start / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def expected_window_results(events: list[Event]) -> dict[str, dict]:
    """What the streaming job must write: key ``<window start>|<kind>`` → its aggregate."""
    results: dict[str, dict] = {}
    for event in events:
        if event.kind == FLUSH_KIND:
            continue
        window = window_start_iso(event.ts)
        key = f"{window}|{event.kind}"
        row = results.setdefault(key, {"window_start": window, "kind": event.kind, "events": 0, "amount": 0})
        row["events"] += 1
        row["amount"] += event.amount
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", default="events")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-create", action="store_true", help="the topic already exists")
    args = parser.parse_args()
    if not args.no_create:
        create_topic(args.bootstrap, args.topic, args.partitions)
    events = generate(args.count, args.partitions, args.seed)
    produce(args.bootstrap, args.topic, events)
    print(f"produced {len(events)} events to {args.topic} ({args.partitions} partitions, seed {args.seed})")


if __name__ == "__main__":
    main()
