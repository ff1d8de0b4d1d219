"""Records produced by client A are read by client B byte for byte, for every pair of adapters."""

from __future__ import annotations

import pytest

from compat_tests.clients.registry import CLIENT_NAMES, make_client

from .support import CODECS, assert_same_records, expressible, mixed_records


def test_cross_client(client_pair, bootstrap, make_topic) -> None:
    producer_name, consumer_name = client_pair
    # Rotate codecs over the pairs so every codec crosses between clients.
    index = CLIENT_NAMES.index(producer_name) * len(CLIENT_NAMES) + CLIENT_NAMES.index(consumer_name)
    codec = CODECS[index % len(CODECS)]
    topic = make_topic()
    records = mixed_records(f"{producer_name}-{codec}", count=10)
    with expressible(producer_name):
        deliveries = make_client(producer_name).produce(bootstrap, topic, records, compression=codec)
    got = make_client(consumer_name).consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert_same_records(records, deliveries, got)


@pytest.mark.full
@pytest.mark.parametrize("codec", CODECS)
def test_cross_client_every_codec(client_pair, codec, bootstrap, make_topic) -> None:
    """--full: every pair with every codec (the default run rotates one codec per pair)."""
    producer_name, consumer_name = client_pair
    topic = make_topic()
    records = mixed_records(f"{producer_name}-{codec}-full", count=50)
    with expressible(producer_name):
        deliveries = make_client(producer_name).produce(bootstrap, topic, records, compression=codec)
    got = make_client(consumer_name).consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert_same_records(records, deliveries, got)
