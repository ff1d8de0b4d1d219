"""Delegation tokens in a cluster: a token made on one broker authenticates on every broker (Kafka's ZK mode:
/delegation_token/tokens/<id> and a token_changes notification; each broker computes the HMAC from the
shared delegation.token.secret.key), including a broker that was down when it was made, and a token
expired on one broker is refused on the others. Real ZooKeeper, three broker processes, each with a
PLAINTEXT listener and a SASL_PLAINTEXT one (PLAIN users, SCRAM for the tokens)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from compat_tests.brokers import free_port
from tests.cluster.conftest import Cluster, wait_for
from tests.integration.test_delegation_tokens import (
    EXPIRE,
    SECRET,
    TOKEN_SETTINGS,
    create_token,
    describe_tokens,
    plain_login,
    token_login,
)
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("delegation-tokens"),
        zookeeper.connect_string,
        overrides={**TOKEN_SETTINGS, "inter.broker.listener.name": "PLAINTEXT"},
    )
    c.sasl_ports = {}  # type: ignore[attr-defined]
    for node, broker in c.brokers.items():
        sasl_port = c.sasl_ports[node] = free_port()  # type: ignore[attr-defined]
        broker.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    try:
        c.start()
        yield c
    finally:
        c.stop()


def sasl(cluster: Cluster, node: int) -> WireClient:
    return WireClient(f"127.0.0.1:{cluster.sasl_ports[node]}")  # type: ignore[attr-defined]


def authenticates(cluster: Cluster, node: int, token_id: str, token_hmac: bytes) -> bool:
    with sasl(cluster, node) as c:
        return token_login(c, token_id, token_hmac)["error_code"] == 0


def test_token_made_on_one_broker_authenticates_on_every_broker(cluster: Cluster, zookeeper) -> None:
    with sasl(cluster, 1) as c:
        plain_login(c, "alice", "alice-secret")
        created = create_token(c, renewers=("bob",))
    token_id, token_hmac = created["token_id"], bytes(created["hmac"])
    # Kafka's ZK layout: the token's JSON (no HMAC) under /delegation_token/tokens.
    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start()
    try:
        data, _ = zk.get(f"/delegation_token/tokens/{token_id}")
    finally:
        zk.stop()
    stored = json.loads(data)
    assert (stored["owner"], stored["renewers"], stored["tokenId"]) == ("User%3Aalice", ["User%3Abob"], token_id)
    assert "hmac" not in stored
    for node in (1, 2, 3):
        wait_for(lambda node=node: authenticates(cluster, node, token_id, token_hmac), 30, f"the token on broker {node}")
    with sasl(cluster, 3) as c:
        plain_login(c, "bob", "bob-secret")
        (described,) = describe_tokens(c, "bob")["tokens"]
        assert bytes(described["hmac"]) == token_hmac == hmac.new(SECRET.encode(), token_id.encode(), hashlib.sha512).digest()

    # A broker down while a token is made knows it once back (read from ZooKeeper at start).
    cluster.brokers[2].stop()
    with sasl(cluster, 1) as c:
        plain_login(c, "alice", "alice-secret")
        second = create_token(c)
    cluster.brokers[2].start(timeout_s=60)
    wait_for(lambda: authenticates(cluster, 2, second["token_id"], bytes(second["hmac"])), 30, "the second token on 2")

    # Expired at once on broker 3 (by its renewer): refused everywhere.
    with sasl(cluster, 3) as c:
        plain_login(c, "bob", "bob-secret")
        assert c.request(EXPIRE, 2, {"hmac": token_hmac, "expiry_time_period_ms": -1})["error_code"] == 0
    for node in (1, 2, 3):
        wait_for(lambda node=node: not authenticates(cluster, node, token_id, token_hmac), 30, f"refused on {node}")
