"""Delegation tokens on pybroker beyond what the compat scenario (compat_tests/scenarios/test_delegation_tokens.py,
run on both brokers) covers: tokens survive a restart (kept in the metadata store, their HMAC recomputed from
the secret), the older request versions (v1, v2: no requester fields) with real tokens, and the SCRAM
``tokenauth`` exchange byte for byte from a client written here (the server's final signature checked).

The helpers are shared with tests/cluster/test_delegation_tokens.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from pathlib import Path

from compat_tests.scenarios.test_sasl import SaslBroker
from tests.wire import WireClient

SECRET = "integration-secret"
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3
CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
TOKEN_SETTINGS = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
    ),
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "delegation.token.secret.key": SECRET,
}
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def plain_login(c: WireClient, user: str, password: str) -> None:
    assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    r = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\x00{user}\x00{password}".encode()})
    assert r["error_code"] == 0, r


def token_login(c: WireClient, token_id: str, hmac_bytes: bytes, mechanism: str = "SCRAM-SHA-256") -> dict:
    """SCRAM with the tokenauth extension, as Kafka's ScramSaslClient sends it; the last SaslAuthenticate
    answer (a success has had its server signature verified)."""
    assert c.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    name = HASHES[mechanism]
    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = f"n={token_id},r={nonce},tokenauth=true"
    first = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,{first_bare}".encode()})
    if first["error_code"] != 0:
        return first
    server_first = bytes(first["auth_bytes"]).decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    assert attrs["r"].startswith(nonce)
    password = base64.b64encode(hmac_bytes)
    salted = hashlib.pbkdf2_hmac(name, password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    final_without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{final_without_proof}".encode()
    signature = hmac.new(hashlib.new(name, client_key).digest(), auth_message, name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = c.request(
        SASL_AUTHENTICATE, 2, {"auth_bytes": f"{final_without_proof},p={base64.b64encode(proof).decode()}".encode()}
    )
    if final["error_code"] == 0:
        server_key = hmac.new(salted, b"Server Key", name).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, name).digest()).decode()
        assert bytes(final["auth_bytes"]).decode() == f"v={expected}"
    return final


def create_token(c: WireClient, version: int = 3, renewers: tuple[str, ...] = (), max_lifetime_ms: int = -1) -> dict:
    body: dict = {"max_lifetime_ms": max_lifetime_ms,
                  "renewers": [{"principal_type": "User", "principal_name": n} for n in renewers]}  # fmt: skip
    if version >= 3:
        body.update(owner_principal_type=None, owner_principal_name=None)
    r = c.request(CREATE, version, body)
    assert r["error_code"] == 0, r
    return r


def describe_tokens(c: WireClient, owner: str, version: int = 3) -> dict:
    return c.request(DESCRIBE, version, {"owners": [{"principal_type": "User", "principal_name": owner}]})


def test_tokens_survive_a_restart_and_older_versions_describe_them(tmp_path: Path) -> None:
    b = SaslBroker("pybroker", tmp_path / "broker", TOKEN_SETTINGS)
    b.launcher.overrides = {k: v for k, v in b.launcher.overrides.items() if "oauthbearer" not in k}
    b.start()
    try:
        with WireClient(b.sasl_bootstrap) as c:
            plain_login(c, "alice", "alice-secret")
            created = create_token(c, version=1, renewers=("bob",))
            assert "token_requester_principal_name" not in created  # v3's field (KIP-373)
            token_id, token_hmac = created["token_id"], bytes(created["hmac"])
            assert token_hmac == hmac.new(SECRET.encode(), token_id.encode(), hashlib.sha512).digest()
        b.stop()
        b.start()
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            with WireClient(b.sasl_bootstrap) as c:
                assert token_login(c, token_id, token_hmac, mechanism)["error_code"] == 0
                assert c.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})["brokers"]  # fmt: skip
                # A token-authenticated connection may not manage tokens (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).
                assert describe_tokens(c, "alice")["error_code"] == 64
        with WireClient(b.sasl_bootstrap) as c:
            plain_login(c, "bob", "bob-secret")
            for version in (1, 2, 3):
                r = describe_tokens(c, "bob", version)
                assert r["error_code"] == 0, r
                (token,) = r["tokens"]
                assert (token["token_id"], bytes(token["hmac"]), token["principal_name"]) == (token_id, token_hmac, "alice")
                assert [x["principal_name"] for x in token["renewers"]] == ["bob"]
                assert ("token_requester_principal_name" in token) == (version >= 3)
            # The renewer expires it; after the restart it is still gone.
            r = c.request(EXPIRE, 2, {"hmac": token_hmac, "expiry_time_period_ms": -1})
            assert (r["error_code"], r["expiry_timestamp_ms"]) == (0, -1)
        b.stop()
        b.start()
        with WireClient(b.sasl_bootstrap) as c:
            assert token_login(c, token_id, token_hmac)["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
    finally:
        b.stop()


def test_renew_and_expire_periods_and_an_expired_token(tmp_path: Path) -> None:
    """Renewal never passes the max timestamp; a positive expiry period moves the expiry; past it (the hourly
    sweep not yet run) renew and expire answer DELEGATION_TOKEN_EXPIRED (DelegationTokenControlManager)."""
    b = SaslBroker("pybroker", tmp_path / "broker", TOKEN_SETTINGS)
    b.launcher.overrides = {k: v for k, v in b.launcher.overrides.items() if "oauthbearer" not in k}
    b.start()
    try:
        with WireClient(b.sasl_bootstrap) as c:
            plain_login(c, "alice", "alice-secret")
            created = create_token(c, max_lifetime_ms=60_000)
            token_hmac = bytes(created["hmac"])
            assert created["max_timestamp_ms"] - created["issue_timestamp_ms"] == 60_000
            assert created["expiry_timestamp_ms"] == created["max_timestamp_ms"]  # expiry.time.ms is a day
            renewed = c.request(RENEW, 2, {"hmac": token_hmac, "renew_period_ms": 3_600_000})
            assert (renewed["error_code"], renewed["expiry_timestamp_ms"]) == (0, created["max_timestamp_ms"])
            before = int(time.time() * 1000)
            expiring = c.request(EXPIRE, 2, {"hmac": token_hmac, "expiry_time_period_ms": 300})
            assert expiring["error_code"] == 0
            assert before + 300 <= expiring["expiry_timestamp_ms"] <= time.time() * 1000 + 300
            time.sleep(0.6)
            for api, body in ((RENEW, {"hmac": token_hmac, "renew_period_ms": -1}),
                              (EXPIRE, {"hmac": token_hmac, "expiry_time_period_ms": -1})):  # fmt: skip
                assert c.request(api, 2, body)["error_code"] == 66  # DELEGATION_TOKEN_EXPIRED
            # Unknown HMAC; renewers must be users (INVALID_PRINCIPAL_TYPE).
            assert c.request(RENEW, 2, {"hmac": b"x" * 64, "renew_period_ms": -1})["error_code"] == 62
            r = c.request(CREATE, 3, {"owner_principal_type": None, "owner_principal_name": None,
                                      "max_lifetime_ms": -1,
                                      "renewers": [{"principal_type": "Group", "principal_name": "g"}]})  # fmt: skip
            assert r["error_code"] == 67  # INVALID_PRINCIPAL_TYPE
    finally:
        b.stop()
