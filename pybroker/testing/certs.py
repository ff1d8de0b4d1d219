"""Certificates for TLS tests, made on the spot with `cryptography` (never checked in): a CA, a
server certificate for 127.0.0.1/localhost and client certificates with a chosen subject, written as
PEM files, inline PEM strings and PKCS12 stores the way Kafka's ``ssl.*`` settings take them."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

STORE_PASSWORD = "test-store-pass"
KEY_PASSWORD = "test-key-pass"


def _name(dn: dict[str, str] | str) -> x509.Name:
    if isinstance(dn, str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dn)])
    oids = {
        "CN": NameOID.COMMON_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "O": NameOID.ORGANIZATION_NAME,
        "L": NameOID.LOCALITY_NAME,
        "ST": NameOID.STATE_OR_PROVINCE_NAME,
        "C": NameOID.COUNTRY_NAME,
        "EMAIL": NameOID.EMAIL_ADDRESS,
    }
    # Listed in RFC 2253 order (as Java prints it: the most specific first): stored the other way round.
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(list(dn.items()))])


@dataclass
class Identity:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    chain: list[x509.Certificate]  # the certificate and its issuers up to (excluding) the root

    def cert_pem(self) -> str:
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in self.chain)

    def key_pem(self, password: str | None = None) -> str:
        encryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        ).decode()

    def write_pem(self, directory: Path, name: str, password: str | None = None) -> tuple[Path, Path]:
        """(certificate chain file, PKCS#8 key file)."""
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_text(self.cert_pem())
        key.write_text(self.key_pem(password))
        return cert, key

    def write_keystore_pem(self, directory: Path, name: str, password: str | None = None) -> Path:
        """One PEM file with the key and the chain (ssl.keystore.type=PEM, ssl.keystore.location)."""
        path = directory / f"{name}-keystore.pem"
        path.write_text(self.key_pem(password) + self.cert_pem())
        return path

    def write_pkcs12(self, directory: Path, name: str, password: str = STORE_PASSWORD) -> Path:
        path = directory / f"{name}.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                name.encode(),
                self.key,
                self.cert,
                self.chain[1:] or None,
                serialization.BestAvailableEncryption(password.encode()),
            )
        )
        return path


class CertificateAuthority:
    def __init__(self, name: str = "pybroker test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write_pem(self, directory: Path, name: str = "ca") -> Path:
        path = directory / f"{name}.crt"
        path.write_text(self.cert_pem())
        return path

    def write_truststore_pkcs12(
        self, directory: Path, name: str = "truststore", password: str = STORE_PASSWORD
    ) -> Path:
        path = directory / f"{name}.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                None, None, None, [self.cert], serialization.BestAvailableEncryption(password.encode())
            )
        )
        return path

    def issue(
        self,
        subject: dict[str, str] | str,
        *,
        server: bool = False,
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
    ) -> Identity:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(subject))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Identity(key, cert, [cert])
