"""Topics with ``compression.type`` naming a codec: the broker recompresses what the producer sent
and every client reads the broker's batches back, byte for byte."""

from __future__ import annotations

import pytest

from .support import assert_same_records, expressible, mixed_records


@pytest.mark.parametrize(("topic_codec", "producer_codec"), [("snappy", "gzip"), ("zstd", "none")])
def test_topic_compression_type_recompresses_and_every_client_reads_it(
    client, client_name, topic_codec, producer_codec, bootstrap, make_topic
) -> None:
    topic = make_topic(configs={"compression.type": topic_codec})
    records = mixed_records(f"{topic_codec}-topic")
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records, compression=producer_codec)
    assert [d.offset for d in deliveries] == list(range(len(records)))
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert_same_records(records, deliveries, got)
