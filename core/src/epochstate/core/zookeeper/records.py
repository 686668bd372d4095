"""The JSON payloads of the registry's znodes.

Payloads are canonical JSON (sorted keys, no spaces, UTF-8), so the same record
always has the same bytes. Records are compared decoded, so an epoch record
written by another client with different formatting still counts as identical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from epochstate.core.zookeeper.errors import InvalidRecord

JsonObject = dict[str, Any]


def encode(record: JsonObject) -> bytes:
    """Canonical JSON bytes of ``record``; InvalidRecord unless it is a JSON object."""
    if not isinstance(record, dict):
        raise InvalidRecord(f"a record must be a dict, got {type(record).__name__}")
    try:
        text = json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidRecord(f"record is not JSON: {error}") from error
    return text.encode("utf-8")


def decode(data: bytes | None) -> JsonObject | None:
    """The object in a znode's data; None when empty or not a JSON object."""
    if not data:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def same_record(left: bytes | None, right: bytes | None) -> bool:
    return left == right or (decode(left) is not None and decode(left) == decode(right))


@dataclass(frozen=True)
class ReplicaState:
    """What one node holds of one job: epochs ``oldest_epoch..newest_epoch`` of query
    ``query_id`` (the job's incarnation; "" when unknown, and then not written)."""

    newest_epoch: int
    oldest_epoch: int
    updated_at_ms: int
    query_id: str = ""

    def encode(self) -> bytes:
        record: JsonObject = {
            "newest_epoch": self.newest_epoch,
            "oldest_epoch": self.oldest_epoch,
            "updated_at_ms": self.updated_at_ms,
        }
        if self.query_id:
            record["query_id"] = self.query_id
        return encode(record)


def node_record(address: str, version: str, started_at_ms: int) -> bytes:
    return encode({"address": address, "version": version, "started_at_ms": started_at_ms})


def job_record(checkpoint: str, query_id: str, operators: list[JsonObject]) -> bytes:
    return encode({"checkpoint": checkpoint, "query_id": query_id, "operators": operators})
