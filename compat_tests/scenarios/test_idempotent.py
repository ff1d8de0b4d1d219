"""Idempotent producer: every record lands exactly once, at contiguous offsets."""

from __future__ import annotations

from .support import assert_same_records, expressible, mixed_records


def test_idempotent_producer_writes_once(client, client_name, bootstrap, make_topic) -> None:
    topic = make_topic()
    records = mixed_records("idem", count=40)
    with expressible(client_name):
        deliveries = client.produce(
            bootstrap, topic, records, compression="none", idempotent=True, acks="all"
        )
    assert [d.offset for d in deliveries] == list(range(len(records)))
    # Ask for one more than was sent: a duplicate would show up as the extra record.
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records) + 1, timeout_s=8)
    assert_same_records(records, deliveries, got)
