"""The JSON-lines contract of the compat programs' ``transactions`` command (Java and Go), shared by
their adapters: one input line per transaction, one output item per transaction with its deliveries."""

from __future__ import annotations

import base64
import json
from typing import Any

from .base import Delivery, Record


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def transactions_input(transactions: list[tuple[list[Record], bool]]) -> str:
    """stdin for ``transactions``: each line a transaction's records and whether to commit it."""
    lines = [
        json.dumps(
            {
                "commit": commit,
                "records": [
                    {
                        "key": _b64(r.key),
                        "value": _b64(r.value),
                        "headers": [[name, _b64(value)] for name, value in r.headers],
                        "partition": r.partition,
                    }
                    for r in records
                ],
            }
        )
        for records, commit in transactions
    ]
    return "\n".join(lines) + "\n"


def transaction_deliveries(out: list[dict[str, Any]]) -> list[list[Delivery]]:
    """The deliveries of each transaction, from the command's output items."""
    return [
        [Delivery(d["partition"], d["offset"], d["timestamp"]) for d in item["deliveries"]] for item in out
    ]
