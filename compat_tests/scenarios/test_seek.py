"""assign() + seek: beginning, an offset in the middle, the end."""

from __future__ import annotations

from .support import mixed_records

COUNT = 10


def _seed(admin, bootstrap, topic):
    records = mixed_records("seek", count=COUNT)
    return records, admin.produce(bootstrap, topic, records)


def test_seek_beginning_offset_and_end(client, bootstrap, make_topic, admin) -> None:
    topic = make_topic()
    records, _ = _seed(admin, bootstrap, topic)

    from_start = client.consume(bootstrap, topic, 0, start="beginning", count=COUNT)
    assert [r.offset for r in from_start] == list(range(COUNT))

    middle = client.consume(bootstrap, topic, 0, start=6, count=COUNT - 6)
    assert [r.offset for r in middle] == list(range(6, COUNT))
    assert [r.value for r in middle] == [r.value for r in records[6:]]

    # Nothing is produced after the end, so a consumer positioned there must get nothing.
    at_end = client.consume(bootstrap, topic, 0, start="end", count=1, timeout_s=4)
    assert at_end == []
