"""Which leading fields of a state store's key Spark shuffles the store's rows by.

A stateful operator's input is hash-partitioned (:mod:`epochstate.core.partitioner`)
by its grouping columns, and each partition keeps its own state. A store's key is
those columns, or those columns followed by something the operator adds:

=============================================  ==========================================  ======
store                                          key                                         fields
=============================================  ==========================================  ======
aggregation, deduplication, (flat)MapGroups-   the grouping (or deduplication) columns      all
WithState, applyInPandasWithState
a stream-stream join's ``*-keyToNumValues``    the join key                                 all
a stream-stream join's ``*-keyWithIndexToValue``  the join key, then the value's index      all - 1
session window aggregation                     the grouping columns, then the session start all - 1
transformWithState value and list variables    the grouping key                             all
transformWithState map variables and timers    ``key`` (the grouping key as a struct), then  1
                                               the map key or the timer's expiry
=============================================  ==========================================  ======

Spark's Murmur3 hashes a struct field by field with the running seed, so hashing
the ``key`` struct of a map variable or a timer gives the partition of its grouping
columns. The daemon (which keys it may answer for) and the routed client (which
shard to ask) use this one rule.
"""

from __future__ import annotations

# A stream-stream join's store of values: its key is the join key and the value's index.
_JOIN_VALUES = "keyWithIndexToValue"
# transformWithState variables keyed by the grouping key alone, and those keyed by
# ``struct<key: grouping key, ...>``.
_GROUPING_KEY_KINDS = frozenset({"value", "list"})
_COMPOSITE_KEY_KINDS = frozenset({"map", "timers"})


def shuffle_fields(operator_name: str, store: str, kind: str, key_fields: int) -> int | None:
    """How many leading fields of the key (of ``key_fields`` fields) of store ``store``
    of an operator named ``operator_name`` Spark partitions the rows by; None: not known
    (an operator this rule does not describe). ``kind``: a transformWithState variable's
    kind ("value", "list", "map", "timers"), else ""."""
    if kind:
        if kind in _GROUPING_KEY_KINDS:
            return key_fields
        return 1 if kind in _COMPOSITE_KEY_KINDS and key_fields >= 1 else None
    if store.endswith(_JOIN_VALUES) or "session" in operator_name.lower():
        return key_fields - 1 if key_fields >= 2 else None
    return key_fields
