"""Kafka's JAAS configuration syntax (``sasl.jaas.config``), as org.apache.kafka.common.security.JaasConfig
reads it with javax.security.auth.login.ConfigFile's grammar:

    <LoginModuleClass> <flag> [key=value ...];

A value is a bare token or a double-quoted string (backslash escapes the next character).  Several modules
may follow one another; Kafka's broker takes exactly one per listener and mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str):
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c in "=;":
            yield c, False
            i += 1
            continue
        if c == '"':
            i += 1
            out = []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(text[i])
                i += 1
            if i >= n:
                raise JaasConfigError("unterminated quoted string")
            i += 1
            yield "".join(out), True
            continue
        start = i
        while i < n and not text[i].isspace() and text[i] not in '=;"':
            i += 1
        yield text[start:i], False


def parse_jaas_config(text: str) -> list[LoginModule]:
    """Every login module of ``text``; JaasConfigError names what is wrong."""
    toks = list(_tokens(text))
    modules: list[LoginModule] = []
    i = 0
    while i < len(toks):
        name, quoted = toks[i]
        if quoted or name in "=;":
            raise JaasConfigError(f"expected a login module class name, found {name!r}")
        if i + 1 >= len(toks):
            raise JaasConfigError(f"login module {name} has no control flag")
        flag = toks[i + 1][0]
        if flag.lower() not in FLAGS:
            raise JaasConfigError(f"invalid control flag {flag!r} of login module {name}")
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasConfigError(f"login module {name} does not end with ';'")
            key, quoted = toks[i]
            if key == ";" and not quoted:
                i += 1
                break
            if i + 2 >= len(toks) or toks[i + 1] != ("=", False):
                raise JaasConfigError(f"option {key!r} of login module {name} has no value")
            options[key] = toks[i + 2][0]
            i += 3
        modules.append(LoginModule(name, flag.lower(), options))
    if not modules:
        raise JaasConfigError("no login module")
    return modules
