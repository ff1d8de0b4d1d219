"""franz-go adapter (github.com/twmb/franz-go: kgo, kadm, kmsg; version pinned in compat_tests/go/go.mod)."""

from __future__ import annotations

from compat_tests.go.adapter import GoCliClient


class FranzGoClient(GoCliClient):
    name = "franz-go"
    library = "franz"
