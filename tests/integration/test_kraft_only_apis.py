"""The KRaft quorum's own APIs (DescribeQuorum, UnregisterBroker, AddRaftVoter, RemoveRaftVoter).

pybroker's cluster is coordinated by ZooKeeper.  Kafka's 3.x message definitions list these four
APIs for the KRaft "broker" and "controller" listeners only, never "zkBroker": a ZooKeeper-mode
Kafka broker did not advertise them, and its SocketServer closed a connection that sent one
("Received request api key ... which is not enabled").  pybroker does the same.
"""

from __future__ import annotations

import pytest

from compat_tests.brokers import api_versions_probe, encode_request, split_bootstrap
from compat_tests.ledger import KRAFT_ONLY_API_KEYS
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS

from .conftest import against_kafka
from .test_bad_input import assert_closed_by_broker, assert_still_serving, connect

pytestmark = pytest.mark.skipif(against_kafka(), reason="Kafka 4.3.1 runs in KRaft mode and offers these APIs")


def test_kraft_only_apis_are_not_advertised(shared_broker) -> None:
    host, port = split_bootstrap(shared_broker.bootstrap)
    error_code, ranges = api_versions_probe(host, port, timeout_s=5)
    assert error_code == 0
    assert not set(KRAFT_ONLY_API_KEYS) & set(ranges), ranges
    assert ranges[57] == (0, 2)  # UpdateFeatures is a zkBroker API, and offered


@pytest.mark.parametrize("api_key", sorted(KRAFT_ONLY_API_KEYS), ids=KRAFT_ONLY_API_KEYS.get)
def test_kraft_only_api_request_closes_the_connection(shared_broker, api_key: int) -> None:
    # A well-formed v0 request (every field at its default), so nothing but the API itself is refused.
    spec = REQUESTS[api_key]
    body = codec.encode(spec, 0, {})
    with connect(shared_broker) as sock:
        sock.sendall(encode_request(api_key, 0, 77, body=body, flexible_header=spec.is_flexible(0)))
        assert_closed_by_broker(sock)
    assert_still_serving(shared_broker)
