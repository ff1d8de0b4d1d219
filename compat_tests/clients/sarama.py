"""sarama adapter (github.com/IBM/sarama, config.Version = DefaultVersion; pinned in compat_tests/go/go.mod).

sarama's ConsumerMessage has no timestamp type, so a scenario that checks it reports the operation
as not expressible rather than guessing; ListOffsets max-timestamp is likewise not expressible.
"""

from __future__ import annotations

from compat_tests.go.adapter import GoCliClient


class SaramaClient(GoCliClient):
    name = "sarama"
    library = "sarama"
