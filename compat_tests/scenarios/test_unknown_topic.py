"""Consuming a topic that does not exist, with the consumer's auto-creation off."""

from __future__ import annotations

import uuid

import pytest

from compat_tests.clients.base import ClientError, NotSupportedByClient

from .support import expressible


def test_unknown_topic_is_not_created(client, client_name, bootstrap, admin) -> None:
    topic = f"compat-missing-{uuid.uuid4().hex[:10]}"
    with expressible(client_name):
        if getattr(client, "consumer_can_disable_auto_create", True) is False:
            raise NotSupportedByClient("its consumer cannot turn topic auto-creation off")
    try:
        got = client.consume(bootstrap, topic, 0, start="beginning", count=1, timeout_s=6)
    except ClientError as exc:  # the client's own unknown-topic error
        assert exc.error in ("UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT"), exc
    else:
        assert got == []  # the client's other behaviour: wait for the topic, get nothing
    with pytest.raises(ClientError) as raised:
        admin.describe_topic(bootstrap, topic)
    assert raised.value.error == "UNKNOWN_TOPIC_OR_PARTITION"
