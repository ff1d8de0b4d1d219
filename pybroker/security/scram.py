"""SCRAM credentials as Kafka keeps them: salt, StoredKey, ServerKey and the iteration count per user and
mechanism (org.apache.kafka.common.security.scram.ScramCredential), derived from the salted password an
AlterUserScramCredentials upsertion carries (ScramFormatter: ClientKey = HMAC(SaltedPassword, "Client Key"),
StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword, "Server Key")).  The password itself is never
received or stored."""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
from dataclasses import dataclass

# ScramControlManager.MAX_ITERATIONS; the minimum is the mechanism's (RFC 7677: 4096).
MAX_ITERATIONS = 16384


class ScramMechanism(enum.Enum):
    """org.apache.kafka.clients.admin.ScramMechanism: the wire type, the SASL name, the hash."""

    SCRAM_SHA_256 = (1, "SCRAM-SHA-256", "sha256")
    SCRAM_SHA_512 = (2, "SCRAM-SHA-512", "sha512")

    def __init__(self, type_id: int, mechanism_name: str, hash_name: str) -> None:
        self.type_id = type_id
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name

    @property
    def min_iterations(self) -> int:
        return 4096

    @classmethod
    def from_type(cls, type_id: int) -> ScramMechanism | None:
        return next((m for m in cls if m.type_id == type_id), None)

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        client_key = hmac.new(salted_password, b"Client Key", mechanism.hash_name).digest()
        stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
        server_key = hmac.new(salted_password, b"Server Key", mechanism.hash_name).digest()
        return cls(bytes(salt), stored_key, server_key, iterations)

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
    ) -> ScramCredential:
        salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, d: dict) -> ScramCredential:
        dec = base64.b64decode
        return cls(dec(d["salt"]), dec(d["stored_key"]), dec(d["server_key"]), int(d["iterations"]))


def unescape_sasl_name(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ',' and ``=3D`` is '=' (ScramFormatter.username)."""
    return name.replace("=2C", ",").replace("=3D", "=")
