"""Which query (incarnation) of a job the registry describes, and how it moves on.

A job's checkpoint may be deleted and recreated: it then holds another Spark query
(another stable query id), whose epochs start again at 0, so its epoch znodes take
the very names of the old query's. The rules that keep a reader from ever combining
one query's epoch record with another query's state:

* The job znode names its current query (``query_id``); every epoch znode and
  replica znode names the query it belongs to (``query_id`` in its record).
* A new query replaces the old one in one transaction that sets the job znode
  (compare-and-set on its version) and deletes the old query's epoch znodes (and
  this node's replica of it). Should there be more than a transaction holds, the
  oldest go first, each batch checked against the same job znode version, which
  to a reader of the old query looks like retention.
* Every write of an epoch (and every retention) checks the job znode's version it
  was registered under, so a daemon still on the old query can never add to (or
  delete from) the new query's epochs.
* Queries only move forward: the job znode keeps the ids of the queries it
  replaced (``retired_query_ids``, the newest :data:`MAX_RETIRED`), and a daemon
  that registers one of those (it has not seen the recreation yet) is refused
  (:class:`IncarnationRetired`) instead of moving the job back.
"""

from __future__ import annotations

from epochstate.core.zookeeper.errors import RegistryError
from epochstate.core.zookeeper.records import JsonObject, decode, encode

MAX_RETIRED = 32
"""Query ids of replaced incarnations the job znode remembers."""


class IncarnationRetired(RegistryError):
    """The query registered for a job was replaced by a newer one (its checkpoint was
    recreated): this node must not write for it. It goes away once the node follows
    the new query."""


class JobZnodeChanged(RegistryError):
    """The job znode changed since this node last wrote it (another node updated it,
    or registered another query); the write was not done and must be redone after
    the job is registered again."""


def query_of(record: JsonObject | None) -> str | None:
    """The query id a job, epoch or replica record names (None: none, an older record)."""
    if record is None:
        return None
    query_id = record.get("query_id")
    return query_id if isinstance(query_id, str) else None


def retired_of(record: JsonObject | None) -> list[str]:
    found = [] if record is None else record.get("retired_query_ids", [])
    return [q for q in found if isinstance(q, str)] if isinstance(found, list) else []


def next_job_record(current: bytes | None, desired: bytes, job: str) -> tuple[bytes, str | None]:
    """The job znode's data to write over ``current`` for ``desired`` (a job record),
    and the query it replaces (None: the same query, or none before).

    Raises:
        IncarnationRetired: ``desired``'s query is one the job znode already replaced.
    """
    wanted = decode(desired) or {}
    query_id = query_of(wanted)
    old = decode(current)
    retired = retired_of(old)
    if query_id is not None and query_id in retired:
        raise IncarnationRetired(
            f"job {job!r}: query {query_id} was replaced by query {query_of(old)} (its checkpoint "
            f"was recreated); not registering the old query again"
        )
    replaced = query_of(old)
    if replaced is None or replaced == query_id:
        replaced = None
    else:
        retired = [*(q for q in retired if q != replaced), replaced][-MAX_RETIRED:]
    if retired:
        wanted["retired_query_ids"] = retired
    return encode(wanted), replaced
