"""Subscription regular expressions of KIP-848 members (ConsumerGroupHeartbeat v1 SubscribedTopicRegex).

Kafka compiles them with RE2J: linear-time matching, no backreferences, no lookaround.  Python's
``re`` backtracks, so the constructs RE2J refuses are refused here too (INVALID_REGULAR_EXPRESSION,
as Kafka answers), and so is an unbounded repetition nested in another one (``(a+)+``), which RE2J
would accept but which could make ``re`` run for exponential time on one topic name and stall the
event loop.  Everything else is matched with ``re.fullmatch`` against topic names, as Kafka matches.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

try:  # Python 3.11+
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older layouts
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT}
_REFUSED = {
    sre_constants.GROUPREF: "backreferences",
    sre_constants.GROUPREF_EXISTS: "conditional groups",
    sre_constants.ASSERT: "lookaround",
    sre_constants.ASSERT_NOT: "lookaround",
    sre_constants.ATOMIC_GROUP: "atomic groups",
    sre_constants.POSSESSIVE_REPEAT: "possessive quantifiers",
}


class InvalidTopicRegex(ValueError):
    pass


def _walk(items: Any, inside_unbounded: bool) -> None:
    for op, arg in items:
        if op in _REFUSED:
            raise InvalidTopicRegex(f"unsupported construct: {_REFUSED[op]}")
        if op in _REPEATS:
            low, high, sub = arg
            unbounded = high == sre_constants.MAXREPEAT or high > 1000
            if unbounded and inside_unbounded:
                raise InvalidTopicRegex("unsupported construct: nested unbounded repetition")
            _walk(sub, inside_unbounded or unbounded)
        elif op == sre_constants.SUBPATTERN:
            _walk(arg[-1], inside_unbounded)
        elif op == sre_constants.BRANCH:
            for branch in arg[1]:
                _walk(branch, inside_unbounded)


@lru_cache(maxsize=256)
def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or InvalidTopicRegex with the reason."""
    try:
        parsed = sre_parse.parse(pattern)
        _walk(parsed, False)
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidTopicRegex(str(exc)) from exc
    except RecursionError as exc:
        raise InvalidTopicRegex("too deeply nested") from exc
