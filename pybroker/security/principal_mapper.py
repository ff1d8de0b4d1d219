"""``ssl.principal.mapping.rules``: a client certificate's subject DN -> a user name (Kafka's
``SslPrincipalMapper``), and the DN itself in the form Java prints it (``X500Principal.getName()``,
RFC 2253), since the rules are regular expressions written against that text.

Rules are comma-separated and tried in order; the first that matches gives the name:
``DEFAULT`` (the DN unchanged) or ``RULE:pattern/replacement/`` with an optional ``L``/``U`` after the
last slash (lower/upper-case the result).  A rule applies when its pattern matches the whole DN; the
result is Java's ``dn.replaceAll(pattern, replacement)``: ``$1`` is a group, ``\\x`` a literal ``x``.
No rule matching is an error (Kafka's ``NoMatchingRule``): the connection is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.x509 import Name, NameAttribute

# Kafka's RULE_PATTERN, RULE_SPLITTER and RULE_PARSER, as Python regular expressions.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
DEFAULT_RULES = "DEFAULT"


class NoMatchingRule(Exception):
    pass


class InvalidRule(ValueError):
    pass


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False
    text: str = "DEFAULT"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m, groups), dn)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result


def _java_replacement(replacement: str, m: re.Match[str], groups: int) -> str:
    """Java's ``Matcher.appendReplacement`` for one match, after Kafka's escaping of back references to
    groups that do not exist (those stay literal text)."""
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        ch = replacement[i]
        if ch == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
            continue
        if ch == "$" and i + 1 < n and replacement[i + 1].isdigit():
            j = i + 1
            ref = int(replacement[j])
            if ref > groups:
                if groups == 0:  # Kafka escapes nothing then: Java fails on the missing group
                    raise InvalidRule(f"No group {ref} in replacement {replacement!r}")
                out.append("$")  # escaped by Kafka's escapeLiteralBackReferences: literal text
                i += 1
                continue
            j += 1
            # Java takes further digits while the number still names an existing group.
            while j < n and replacement[j].isdigit() and ref * 10 + int(replacement[j]) <= groups:
                ref = ref * 10 + int(replacement[j])
                j += 1
            out.append(m.group(ref) or "")
            i = j
            continue
        if ch == "$" and replacement[i + 1 : i + 2] == "{":
            end = replacement.find("}", i)
            if end < 0:
                raise InvalidRule(f"named capturing group is missing trailing '}}' in {replacement!r}")
            out.append(m.group(replacement[i + 2 : end]) or "")
            i = end + 1
            continue
        if ch == "$":
            raise InvalidRule(f"Illegal group reference in replacement {replacement!r}")
        out.append(ch)
        i += 1
    return "".join(out)


class SslPrincipalMapper:
    def __init__(self, rules: str | None = DEFAULT_RULES) -> None:
        self.rules = _parse_rules(_split_rules(DEFAULT_RULES if rules is None else rules))

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRule(
            f"No rules apply to {distinguished_name}, rules [{', '.join(r.text for r in self.rules)}]"
        )

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(r.text for r in self.rules)}])"


def _split_rules(text: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]


def _parse_rules(rules: list[str]) -> list[_Rule]:
    result: list[_Rule] = []
    for rule in rules:
        m = _RULE_PARSER.match(rule)
        if m is None:
            raise InvalidRule(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise InvalidRule(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`")
        if m.group(1) is not None:
            result.append(_Rule(None))
        elif m.group(2) is not None:
            try:
                pattern = re.compile(m.group(2))
            except re.error as e:
                raise InvalidRule(f"Invalid rule: {rule}: {e}") from None
            case = m.group(6)
            result.append(_Rule(pattern, m.group(4), case == "L", case == "U", rule))
        # an empty rule is ignored, as in Kafka
    return result


# -- the DN as Java prints it ------------------------------------------------------------------------

# The attribute keywords of RFC 2253 that X500Principal.getName() prints by name; every other attribute
# is printed as its OID with the DER encoding of its value in hex (``1.2.840.113549.1.9.1=#16...``).
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_STRING_ENCODINGS = {
    12: "utf-8",
    19: "ascii",
    20: "latin-1",
    22: "ascii",
    26: "ascii",
    28: "utf-32-be",
    30: "utf-16-be",
}


def rfc2253_name(name: Name) -> str:
    """A ``cryptography.x509.Name`` as Java's ``X500Principal.getName()`` (RFC 2253): the last RDN first,
    multi-valued RDNs joined with '+', RFC 2253 keywords by name, other attributes as OID=#hex."""
    rdns = []
    for rdn in reversed(list(name.rdns)):
        parts = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is not None:
                value = attr.rfc4514_string().split("=", 1)[1]
                parts.append(f"{keyword}={value}")
            else:
                parts.append(f"{oid}=#{_der_value(attr).hex()}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _der_value(attr: NameAttribute) -> bytes:
    value = attr.value
    asn1_type = getattr(attr, "_type", None)  # private in cryptography: the value's ASN.1 string type
    tag = int(asn1_type.value) if asn1_type is not None else 12
    body = value if isinstance(value, bytes) else str(value).encode(_STRING_ENCODINGS.get(tag, "utf-8"))
    n = len(body)
    if n < 0x80:
        length = bytes([n])
    else:
        octets = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(octets)]) + octets
    return bytes([tag]) + length + body
