"""A daemon holding some partitions of a job never answers "absent" for a key it does not hold."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.core.partitioner import partition_of
from epochstate.core.sparktypes import AtomicType, StructField, StructType, type_to_json
from epochstate.daemon.codec.keycodec import encode_fields
from epochstate.daemon.server.held_partitions import PartitionNotHeld, check_held
from epochstate.daemon.store.catalog import JobEntry, StoreHandle
from epochstate.daemon.store.descriptors import JobDescriptor, StoreDescriptor

USER = StructType((StructField("user", AtomicType("string")),))
VALUE = StructType((StructField("count", AtomicType("long")),))
PARTITIONS = 2


def _user_in(partition: int) -> str:
    return next(
        u for u in (f"user-{i}" for i in range(100)) if partition_of([u], USER, PARTITIONS) == partition
    )


def _handle(
    key: StructType, *, store: str = "default", operator: str = "stateStoreSave", kind: str = ""
) -> StoreHandle:
    descriptor = StoreDescriptor(
        1,
        "orders",
        0,
        operator,
        store,
        PARTITIONS,
        json.dumps(type_to_json(key)),
        json.dumps(type_to_json(VALUE)),
        kind,
    )
    return StoreHandle.of(descriptor)


def _entry(held: PartitionRanges | None) -> JobEntry:
    return JobEntry(JobDescriptor("orders", 1, "/cp/orders", "q-1", partitions=held))


def test_keys_of_partitions_not_held_are_refused_never_absent() -> None:
    handle = _handle(USER)
    mine, other = encode_fields([_user_in(1)]), encode_fields([_user_in(0)])
    partial = _entry(PartitionRanges.of([(1, 1)]))
    check_held(partial, handle, handle.latest, [mine], [None])  # held: "absent" is true
    with pytest.raises(PartitionNotHeld) as refused:
        check_held(partial, handle, handle.latest, [mine, other], [b"x", None])
    assert refused.value.reason == "PARTITION_NOT_HELD"
    assert refused.value.metadata == {"job": "orders", "partition": "0", "heldPartitions": "1"}
    # Holding every partition (no ranges, or ranges covering the store's): nothing is checked.
    for whole in (None, PartitionRanges.of([(0, 1)])):
        check_held(_entry(whole), handle, handle.latest, [other], [None])


def test_a_joins_values_are_partitioned_by_the_join_key_alone() -> None:
    key = StructType((*USER.fields, StructField("index", AtomicType("long"))))
    handle = _handle(key, store="left-keyWithIndexToValue", operator="symmetricHashJoin")
    partial = _entry(PartitionRanges.of([(1, 1)]))
    user = _user_in(1)
    # Whatever the whole key would hash to, the row lives in the join key's partition.
    for index in range(8):
        check_held(partial, handle, handle.latest, [encode_fields([user, index])], [None])
    with pytest.raises(PartitionNotHeld):
        check_held(partial, handle, handle.latest, [encode_fields([_user_in(0), 0])], [None])


def test_session_windows_and_state_variables_are_partitioned_by_the_grouping_key() -> None:
    """A session's key ends in its start; a map variable's and a timer's key is the
    grouping key as a struct, then the map key or the expiry (Spark's Murmur3 hashes a
    struct field by field, so the struct hashes as its columns would)."""
    session_key = StructType((*USER.fields, StructField("sessionStartTime", AtomicType("timestamp"))))
    grouping = StructField("key", USER)
    map_key = StructType((grouping, StructField("user_map_key", AtomicType("string"))))
    timer_key = StructType((grouping, StructField("expiration_timestamp_ms", AtomicType("long"))))
    # Each store, and its key of a user and a number (the session's start, the map key, the expiry).
    stores: list[tuple[StoreHandle, Callable[[str, int], list[Any]]]] = [
        (_handle(session_key, operator="sessionWindowStateStoreSaveExec"), lambda u, i: [u, i]),
        (_handle(map_key, operator="transformWithStateExec", kind="map"), lambda u, i: [(u,), f"k{i}"]),
        (
            _handle(timer_key, operator="transformWithStateExec", store="$timers", kind="timers"),
            lambda u, i: [(u,), i],
        ),
    ]
    partial = _entry(PartitionRanges.of([(1, 1)]))
    for handle, key in stores:
        for i in range(8):
            check_held(partial, handle, handle.latest, [encode_fields(key(_user_in(1), i))], [None])
        with pytest.raises(PartitionNotHeld) as refused:
            check_held(partial, handle, handle.latest, [encode_fields(key(_user_in(0), 0))], [None])
        assert refused.value.metadata["partition"] == "0"


def test_where_the_partition_cannot_be_told_only_found_keys_are_answered() -> None:
    unknown = _handle(USER, operator="transformWithStateExec", kind="aKindOfLaterReleases")
    partial = _entry(PartitionRanges.of([(1, 1)]))
    key = encode_fields([_user_in(0)])
    check_held(partial, unknown, unknown.latest, [key], [b"found"])
    with pytest.raises(PartitionNotHeld) as refused:
        check_held(partial, unknown, unknown.latest, [key], [None])
    assert refused.value.metadata["partition"] == ""
