"""The server side of an SSL listener (Kafka's ``SslFactory`` + ``DefaultSslEngineFactory``): an
``ssl.SSLContext`` built from Kafka's ``ssl.*`` settings, and the principal of a TLS connection.

Key stores: ``PEM`` (a file in ``ssl.keystore.location`` or inline ``ssl.keystore.certificate.chain``
+ ``ssl.keystore.key``, the key PKCS#8, encrypted with ``ssl.key.password`` if given) and ``PKCS12``
(``ssl.keystore.location`` + ``ssl.keystore.password``; a ``JKS``-typed store is read as PKCS12, as
Java 9+ does for a store that is PKCS12 inside; a real JKS store is refused with a clear message).
Trust stores likewise (``ssl.truststore.*``).  The private key is handed to OpenSSL through an
anonymous in-memory file (memfd), never written to disk in the clear.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pybroker.security.context import ANONYMOUS, SSL, KafkaPrincipal
from pybroker.security.principal_mapper import InvalidRule, SslPrincipalMapper, rfc2253_name

log = logging.getLogger(__name__)


class SslConfigError(ValueError):
    """A listener's ssl.* settings cannot make a working TLS server (the key names the setting)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# Java/IANA names of the TLS 1.2 suites OpenSSL offers, by IANA code point (OpenSSL names them otherwise).
_IANA_SUITES = {
    0xC02C: "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    0xC030: "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    0xCCA9: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    0xCCA8: "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    0xCCAA: "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    0xC024: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384",
    0xC028: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
    0xC023: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    0xC027: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    0x009F: "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
    0x009E: "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
    0x006B: "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256",
    0x0067: "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256",
    0x009D: "TLS_RSA_WITH_AES_256_GCM_SHA384",
    0x009C: "TLS_RSA_WITH_AES_128_GCM_SHA256",
    0x003D: "TLS_RSA_WITH_AES_256_CBC_SHA256",
    0x003C: "TLS_RSA_WITH_AES_128_CBC_SHA256",
    0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
    0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA",
}
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def _pem_blocks(text: str) -> list[tuple[str, str]]:
    """(label, normalised PEM) of every block: a properties value joined from continuation lines has
    spaces where the newlines were, as Kafka's PemStore tolerates."""
    blocks = []
    for m in _PEM_BLOCK.finditer(text):
        body = re.sub(r"\s+", "", m.group(2))
        lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
        blocks.append((m.group(1), f"-----BEGIN {m.group(1)}-----\n{lines}\n-----END {m.group(1)}-----\n"))
    return blocks


class ServerSslFactory:
    """The SSLContext of one SSL listener and the principal of its connections.

    ``get(key)`` returns the listener's value of an ``ssl.*`` key (``listener.name.<l>.<key>`` first)."""

    def __init__(self, listener_name: str, get: Callable[[str], Any], security_protocol: str = SSL) -> None:
        self.listener_name = listener_name
        # On SASL_SSL the principal is SASL's; a client certificate is only checked, never mapped.
        self.maps_principal = security_protocol == SSL
        self.client_auth = str(get("ssl.client.auth") or "none").lower()
        try:
            self.principal_mapper = SslPrincipalMapper(get("ssl.principal.mapping.rules"))
        except InvalidRule as e:
            raise SslConfigError("ssl.principal.mapping.rules", str(e)) from None
        self.context = self._context(get)

    # -- the context -------------------------------------------------------------------------------
    def _context(self, get: Callable[[str], Any]) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
        self._protocols(ctx, get)
        self._ciphers(ctx, get("ssl.cipher.suites") or [])
        self._load_keystore(ctx, get)
        ctx.verify_mode = {
            "required": ssl.CERT_REQUIRED,
            "requested": ssl.CERT_OPTIONAL,
        }.get(self.client_auth, ssl.CERT_NONE)
        if ctx.verify_mode != ssl.CERT_NONE:
            cadata = self._truststore(get)
            if cadata is None:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Java's default trust store: the system's
            else:
                ctx.load_verify_locations(cadata=cadata)
        return ctx

    @staticmethod
    def _protocols(ctx: ssl.SSLContext, get: Callable[[str], Any]) -> None:
        enabled = list(get("ssl.enabled.protocols") or [])
        if not enabled:  # Kafka then leaves the engine's default: what ssl.protocol offers
            protocol = str(get("ssl.protocol") or "TLS")
            enabled = ["TLSv1.2", "TLSv1.3"] if protocol in ("TLS", "SSL") else [protocol]
        unknown = [p for p in enabled if p not in _PROTOCOLS]
        if unknown:
            raise SslConfigError(
                "ssl.enabled.protocols",
                f"unsupported TLS protocol(s) {', '.join(unknown)} (supported: {', '.join(_PROTOCOLS)})",
            )
        versions = sorted(_PROTOCOLS[p] for p in enabled)
        try:
            ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        except (ValueError, ssl.SSLError) as e:
            raise SslConfigError(
                "ssl.enabled.protocols", f"cannot enable {', '.join(enabled)}: {e}"
            ) from None

    @staticmethod
    def _ciphers(ctx: ssl.SSLContext, suites: list[str]) -> None:
        if not suites:
            return
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        probe.set_ciphers("ALL:@SECLEVEL=0")
        openssl_by_iana = {}
        openssl_names = set()
        for c in probe.get_ciphers():
            openssl_names.add(c["name"])
            iana = _IANA_SUITES.get(c["id"] & 0xFFFF)
            if iana is not None:
                openssl_by_iana[iana] = c["name"]
        tls12 = []
        for suite in suites:
            if suite in TLS13_SUITES:
                continue
            name = openssl_by_iana.get(suite, suite if suite in openssl_names else None)
            if name is None:
                raise SslConfigError("ssl.cipher.suites", f"unsupported cipher suite {suite}")
            tls12.append(name)
        tls13 = {s for s in suites if s in TLS13_SUITES}
        if tls13 and tls13 != TLS13_SUITES:
            log.warning(
                "ssl.cipher.suites: Python cannot narrow the TLS 1.3 suites; all of %s stay enabled",
                ", ".join(sorted(TLS13_SUITES)),
            )
        if tls12:
            ctx.set_ciphers(":".join(tls12))
        elif (
            ctx.maximum_version is ssl.TLSVersion.TLSv1_3
            or ctx.maximum_version is ssl.TLSVersion.MAXIMUM_SUPPORTED
        ):
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # only TLS 1.3 suites listed: no TLS 1.2 handshake

    def _load_keystore(self, ctx: ssl.SSLContext, get: Callable[[str], Any]) -> None:
        store_type = str(get("ssl.keystore.type") or "JKS").upper()
        location = get("ssl.keystore.location")
        chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
        key_password = get("ssl.key.password")
        if store_type == "PEM":
            if get("ssl.keystore.password") is not None:
                raise SslConfigError(
                    "ssl.keystore.password",
                    "SSL key store password cannot be specified with PEM format, "
                    "only key password may be specified",
                )
            if location and (chain or key):
                raise SslConfigError(
                    "ssl.keystore.location",
                    "set either ssl.keystore.location or ssl.keystore.certificate.chain and "
                    "ssl.keystore.key, not both",
                )
            if location:
                text = _read_text("ssl.keystore.location", location)
            elif chain and key:
                text = f"{key}\n{chain}"
            else:
                raise SslConfigError(
                    "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain",
                    f"listener {self.listener_name}: a PEM key store needs ssl.keystore.location, or both "
                    "ssl.keystore.certificate.chain and ssl.keystore.key",
                )
            pem = _pem_key_and_chain(text, key_password)
        else:
            if not location:
                raise SslConfigError(
                    "ssl.keystore.location",
                    f"listener {self.listener_name} (SSL) needs a key store: set ssl.keystore.location "
                    "(PKCS12) or ssl.keystore.type=PEM with ssl.keystore.certificate.chain and "
                    "ssl.keystore.key",
                )
            pem = _pkcs12_key_and_chain(location, get("ssl.keystore.password"), key_password, store_type)
        with _anonymous_file(pem) as path:
            try:
                ctx.load_cert_chain(path)
            except ssl.SSLError as e:
                raise SslConfigError("ssl.keystore.location", f"the key store cannot be used: {e}") from None

    @staticmethod
    def _truststore(get: Callable[[str], Any]) -> str | None:
        """The trusted certificates as PEM text; None when no trust store is configured."""
        store_type = str(get("ssl.truststore.type") or "JKS").upper()
        location = get("ssl.truststore.location")
        inline = get("ssl.truststore.certificates")
        if store_type == "PEM":
            if get("ssl.truststore.password") is not None:
                raise SslConfigError(
                    "ssl.truststore.password", "SSL trust store password cannot be specified for PEM format."
                )
            if location and inline:
                raise SslConfigError(
                    "ssl.truststore.location",
                    "set either ssl.truststore.location or ssl.truststore.certificates, not both",
                )
            text = _read_text("ssl.truststore.location", location) if location else inline
            if not text:
                return None
            certs = [pem for label, pem in _pem_blocks(text) if label == "CERTIFICATE"]
            if not certs:
                raise SslConfigError("ssl.truststore.certificates", "no PEM certificate in the trust store")
            return "".join(certs)
        if not location:
            return None
        return _pkcs12_trusted(location, get("ssl.truststore.password"), store_type)

    # -- principals ---------------------------------------------------------------------------------
    def principal(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket | None
    ) -> tuple[KafkaPrincipal, str | None]:
        """(principal, subject DN) of an established TLS connection: the mapped DN of a verified client
        certificate, User:ANONYMOUS without one (Kafka's DefaultKafkaPrincipalBuilder). Raises
        NoMatchingRule when no mapping rule applies (the connection is then refused)."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der or not self.maps_principal:
            return ANONYMOUS, None
        from cryptography import x509

        dn = rfc2253_name(x509.load_der_x509_certificate(der).subject)
        return KafkaPrincipal.user(self.principal_mapper.name(dn)), dn


# -- key and trust stores -----------------------------------------------------------------------------


def _read_text(key: str, location: str) -> str:
    try:
        return Path(location).read_text(encoding="ascii", errors="replace")
    except OSError as e:
        raise SslConfigError(key, f"cannot read {location}: {e.strerror or e}") from None


def _pem_key_and_chain(text: str, key_password: str | None) -> bytes:
    from cryptography.hazmat.primitives import serialization

    blocks = _pem_blocks(text)
    keys = [pem for label, pem in blocks if label in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")]
    certs = [pem for label, pem in blocks if label == "CERTIFICATE"]
    if len(keys) != 1:
        raise SslConfigError(
            "ssl.keystore.key", f"a PEM key store needs exactly one PKCS#8 private key, found {len(keys)}"
        )
    if not certs:
        raise SslConfigError("ssl.keystore.certificate.chain", "a PEM key store needs its certificate chain")
    password = key_password.encode() if key_password else None
    encrypted = keys[0].startswith("-----BEGIN ENCRYPTED")
    try:
        private_key = serialization.load_pem_private_key(keys[0].encode(), password if encrypted else None)
    except (ValueError, TypeError) as e:
        raise SslConfigError("ssl.key.password", f"cannot read the private key: {e}") from None
    return _unencrypted_pem(private_key) + "".join(certs).encode()


def _unencrypted_pem(private_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pkcs12(location: str, password: str | None, store_type: str, key: str) -> Any:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        data = Path(location).read_bytes()
    except OSError as e:
        raise SslConfigError(key, f"cannot read {location}: {e.strerror or e}") from None
    if data[:4] == b"\xfe\xed\xfe\xed":
        raise SslConfigError(
            key,
            f"{location} is a JKS key store, which pybroker cannot read: convert it to PKCS12 "
            f"(keytool -importkeystore -deststoretype PKCS12) or PEM",
        )
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise SslConfigError(key, f"cannot read {store_type} store {location}: {e}") from None


def _pkcs12_key_and_chain(
    location: str, password: str | None, key_password: str | None, store_type: str
) -> bytes:
    from cryptography.hazmat.primitives import serialization

    try:
        store = _pkcs12(location, password, store_type, "ssl.keystore.location")
    except SslConfigError:
        if not key_password or key_password == password:
            raise
        store = _pkcs12(location, key_password, store_type, "ssl.keystore.location")
    if store.key is None or store.cert is None:
        raise SslConfigError("ssl.keystore.location", f"{location} holds no private key with its certificate")
    chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
    return _unencrypted_pem(store.key) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)


def _pkcs12_trusted(location: str, password: str | None, store_type: str) -> str:
    from cryptography.hazmat.primitives import serialization

    store = _pkcs12(location, password, store_type, "ssl.truststore.location")
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise SslConfigError("ssl.truststore.location", f"{location} holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


@contextlib.contextmanager
def _anonymous_file(data: bytes) -> Iterator[str]:
    """A path to `data` that OpenSSL can open: an in-memory file where Linux has them (memfd), else
    a private temporary file removed at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pybroker-keystore", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="pybroker-ssl-") as d:
        path = os.path.join(d, "keystore.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
        try:
            yield path
        finally:
            os.unlink(path)
