"""A record above the topic's max.message.bytes is refused with the client's too-large error."""

from __future__ import annotations

import os

import pytest

from compat_tests.clients.base import ClientError, Record

from .support import expressible


def test_record_above_max_message_bytes_is_refused(client, client_name, bootstrap, make_topic, admin) -> None:
    topic = make_topic(configs={"max.message.bytes": "2000"})
    big = Record(b"big", os.urandom(8000))  # random: compression cannot shrink it under the limit
    with expressible(client_name), pytest.raises(ClientError) as raised:
        client.produce(bootstrap, topic, [big], compression="none")
    assert raised.value.error == "MESSAGE_TOO_LARGE", raised.value
    assert admin.list_offsets(bootstrap, topic, 0, "latest").offset == 0, "nothing may be written"
    deliveries = client.produce(bootstrap, topic, [Record(b"small", b"fits")])
    assert deliveries[0].offset == 0
