"""The sans-IO SASL pieces: Kafka's JAAS syntax, SCRAM credentials against a real SCRAM client (scramp's),
the SaslServerAuthenticator state machine with a hand-moved clock."""

from __future__ import annotations

import base64
import json
import struct

import pytest
import scramp

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.security.authenticator import SaslServerAuthenticator, SaslState
from pybroker.security.context import ConnectionSecurity
from pybroker.security.jaas import JaasConfigError, parse_jaas_config
from pybroker.security.mechanisms import SaslError, ScramSaslServer
from pybroker.security.oauthbearer import InvalidToken, UnsecuredJwsValidator
from pybroker.security.sasl_config import SaslListenerConfig
from pybroker.security.scram import ScramCredential, ScramMechanism


def test_jaas_syntax() -> None:
    (module,) = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="a;b \\"c\\"" user_alice=alice-secret;'
    )
    assert module.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": 'a;b "c"', "user_alice": "alice-secret"}
    assert len(parse_jaas_config("A required; B optional x=1;")) == 2
    for bad in ("A required", "A maybe;", 'A required x="open;', "A required x;", ""):
        with pytest.raises(JaasConfigError):
            parse_jaas_config(bad)


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_scram_exchange_with_a_stock_client(mechanism: ScramMechanism) -> None:
    salt = b"0123456789abcdef"
    # What AlterUserScramCredentials carries: the salted password, never the password.
    import hashlib

    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, b"pencil", salt, 4096)
    stored = ScramCredential.from_salted_password(mechanism, salt, salted, 4096)
    assert stored == ScramCredential.from_password(mechanism, "pencil", salt, 4096)
    assert ScramCredential.from_json(json.loads(json.dumps(stored.to_json()))) == stored

    def lookup(user: str, m: ScramMechanism) -> ScramCredential | None:
        return stored if (user, m) == ("user,=x", mechanism) else None

    for password, ok in (("pencil", True), ("wrong", False)):
        client = scramp.ScramClient([mechanism.mechanism_name], "user,=x", password)
        server = ScramSaslServer(mechanism, lookup)
        server_first = server.evaluate_response(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        if not ok:
            with pytest.raises(SaslError):
                server.evaluate_response(client.get_client_final().encode())
            continue
        server_final = server.evaluate_response(client.get_client_final().encode())
        client.set_server_final(server_final.decode())  # the client checks the server's signature
        assert server.complete and server.authorization_id == "user,=x"
    with pytest.raises(SaslError):  # an unknown user is the same generic failure as a wrong password
        ScramSaslServer(mechanism, lookup).evaluate_response(b"n,,n=nobody,r=abc")


def test_unsecured_jws_rules() -> None:
    now = 1_000_000.0
    v = UnsecuredJwsValidator({"unsecuredValidatorRequiredScope": "read"}, clock=lambda: now)

    def jws(claims: dict, alg: str = "none", sig: str = "") -> str:
        b64 = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
        return f"{b64({'alg': alg})}.{b64(claims)}.{sig}"

    good = {"sub": "u", "iat": now - 1, "exp": now + 60, "scope": "read write"}
    assert v.validate(jws(good)).principal == "u"
    assert v.validate(jws(good)).expiration_ms == int((now + 60) * 1000)
    for token in (
        jws(good, alg="RS256"),
        jws(good, sig="abc"),
        jws({k: x for k, x in good.items() if k != "sub"}),
        jws({k: x for k, x in good.items() if k != "exp"}),
        jws(dict(good, exp=now - 1)),
        jws(dict(good, iat=now + 100, exp=now + 200)),
        "not-a-token",
    ):
        with pytest.raises(InvalidToken):
            v.validate(token)
    with pytest.raises(InvalidToken) as info:
        v.validate(jws(dict(good, scope="write")))
    assert info.value.scope == "read"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(api_key: int, version: int, body: dict, correlation_id: int = 1) -> memoryview:
    head = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t"
    if version in REQUESTS[api_key].flexible_versions:
        head += b"\x00"
    return memoryview(head + codec.encode(REQUESTS[api_key], version, body))


def test_authenticator_session_and_reauthentication() -> None:
    clock = Clock()
    config = SaslListenerConfig("SASL_PLAINTEXT", ["PLAIN"], plain_users={"alice": "pw", "bob": "pw"})
    config.reauth_ms["PLAIN"] = 10_000
    security = ConnectionSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 1)
    auth = SaslServerAuthenticator(config, lambda u, m: None, security, monotonic=clock, wall_clock=clock)
    assert auth.receive(request(18, 3, {"client_software_name": "a", "client_software_version": "1"})).passthrough
    out = auth.receive(request(17, 1, {"mechanism": "PLAIN"}))
    assert out.response[3] == {"error_code": 0, "mechanisms": ["PLAIN"]}
    out = auth.receive(request(36, 2, {"auth_bytes": b"\x00alice\x00pw"}))
    assert out.close is None and out.response[3]["session_lifetime_ms"] == 10_000
    assert auth.complete and str(security.principal) == "User:alice"
    clock.now += 9.9
    assert not auth.session_expired()
    assert auth.maybe_begin_reauthentication()
    assert not auth.complete and auth.state is SaslState.REAUTH_PROCESS_HANDSHAKE
    auth.receive(request(17, 1, {"mechanism": "PLAIN"}))
    out = auth.receive(request(36, 2, {"auth_bytes": b"\x00alice\x00pw"}))
    assert out.response[3]["error_code"] == 0 and auth.complete
    assert not auth.maybe_begin_reauthentication()  # at most one re-authentication per second
    clock.now += 9.9  # within the new session, past the old one
    assert not auth.session_expired()
    clock.now += 0.2
    assert auth.session_expired()
    # A re-authentication as another principal is refused.
    assert auth.maybe_begin_reauthentication()
    auth.receive(request(17, 1, {"mechanism": "PLAIN"}))
    out = auth.receive(request(36, 2, {"auth_bytes": b"\x00bob\x00pw"}))
    assert out.response[3]["error_code"] == 58 and out.close is not None
    decoded = codec.encode(RESPONSES[36], 2, out.response[3])
    assert b"Cannot change principals during re-authentication from User.alice: User.bob" in decoded
