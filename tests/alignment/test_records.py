"""Subject paths, znode records and the source's offsets: plain values, no services."""

from __future__ import annotations

import json

import pytest

from epochstate.core.alignment.commands import Command, Report
from epochstate.spark_plugin.alignment import (
    CorruptSubjectRecord,
    InvalidOption,
    InvalidSubjectName,
    SourceRecord,
    SubjectEpoch,
    SubjectLayout,
    SubjectOffset,
)
from epochstate.spark_plugin.alignment.offsets import limited
from epochstate.spark_plugin.alignment.options import SourceOptions
from epochstate.spark_plugin.kafka import OffsetRange


def test_subject_paths() -> None:
    layout = SubjectLayout()
    assert layout.epoch("orders", 42) == "/epochstate/subjects/orders/epochs/0000000000000000042"
    assert layout.source("orders", "job-a") == "/epochstate/subjects/orders/sources/job-a"
    assert SubjectLayout("/").epochs("t") == "/subjects/t/epochs"
    for topic in ("", "a/b", "..", "x" * 250):
        with pytest.raises(InvalidSubjectName):
            layout.subject(topic)
    with pytest.raises(InvalidSubjectName):
        layout.epoch("t", -1)
    with pytest.raises(InvalidOption):
        SubjectLayout("relative")


def test_epoch_record_round_trip() -> None:
    ranges = (OffsetRange("t", 1, 5, 9), OffsetRange("t", 0, 0, 3))
    epoch = SubjectEpoch("t", 7, ranges, writer="job", query_id="q", committed_at_ms=123)
    assert [r.partition for r in epoch.ranges] == [0, 1]
    assert json.loads(epoch.encode()) == {
        "partitions": {"0": [0, 3], "1": [5, 9]},
        "writer": "job",
        "query_id": "q",
        "committed_at_ms": 123,
        "end_position": {"0": 3, "1": 9},
    }
    assert SubjectEpoch.decode("t", 7, epoch.encode()) == epoch
    assert epoch.end_positions == {0: 3, 1: 9}
    after = SubjectEpoch("t", 8, (OffsetRange("t", 1, 12, 14),), "job", "q", 124, epoch.end_position)
    assert after.end_position == {0: 3, 1: 14}, "partitions not written keep the previous end"
    for bad in (b"", b"[]", b'{"partitions": {"0": [3]}}'):
        with pytest.raises(CorruptSubjectRecord):
            SubjectEpoch.decode("t", 7, bad)
    with pytest.raises(ValueError, match="two ranges"):
        SubjectEpoch("t", 0, (OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2)), "w", None, 0)


def test_source_record_keeps_the_newest_entries_and_unknown_fields() -> None:
    record = SourceRecord.decode("t", "j", b'{"mode": "aligned", "owner": {"team": 9}}')
    updated = record.with_entries([(b, b + 10) for b in range(5)], keep=3, now_ms=1)
    assert dict(updated.mapping) == {2: 12, 3: 13, 4: 14}
    assert json.loads(updated.encode()) == {
        "mode": "aligned",
        "mapping": {"2": 12, "3": 13, "4": 14},
        "updated_at_ms": 1,
        "owner": {"team": 9},
    }
    assert SourceRecord.decode("t", "j", updated.encode()) == updated
    with pytest.raises(CorruptSubjectRecord):
        SourceRecord.decode("t", "j", b'{"mode": "sideways"}')


def test_commands_and_reports_round_trip() -> None:
    command = Command("align", 3, epoch=7, issued_at_ms=11)
    report = Report("ready", {1: 9, 0: 4}, subject_epoch=6, batch=12, answers=3, refused="passed")
    record = SourceRecord("unaligned", {}, 1, {}, command, report)
    assert SourceRecord.decode("t", "j", record.encode()) == record
    assert json.loads(record.encode())["report"]["position"] == {"0": 4, "1": 9}
    bad_command, bad_state = (
        b'{"mode": "aligned", "command": "CatchUp"}',
        b'{"mode": "aligned", "report": {"state": "x"}}',
    )
    for bad in (bad_command, bad_state):
        with pytest.raises(CorruptSubjectRecord):
            SourceRecord.decode("t", "j", bad)
    with pytest.raises(ValueError, match="only align"):
        Command("catch-up", 1, epoch=2)


def test_offsets_have_one_json_form() -> None:
    offset = SubjectOffset("t", 3, {10: 5, 2: 7})
    assert json.dumps(offset.to_json()) == '{"subject": "t", "epoch": 3, "positions": {"2": 7, "10": 5}}'
    assert SubjectOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset
    assert SubjectOffset.parse(json.dumps(offset.to_json()), "t") == offset
    assert SubjectOffset.parse(json.dumps(offset.to_json()), "other") is None
    assert SubjectOffset.parse('{"logOffset": 3}', "t") is None
    following = SubjectEpoch("t", 4, (OffsetRange("t", 2, 7, 9),), "w", None, 0)
    assert offset.after(following) == SubjectOffset("t", 4, {2: 9, 10: 5})


def test_unaligned_ranges_start_new_partitions_at_their_earliest_offset() -> None:
    start, end = SubjectOffset("t", None, {0: 4}), SubjectOffset("t", None, {0: 9, 1: 6})
    assert start.ranges_to(end, {1: 2}) == [OffsetRange("t", 0, 4, 9), OffsetRange("t", 1, 2, 6)]


def test_rate_limit_shares_in_proportion() -> None:
    assert limited({0: 0, 1: 0}, {0: 5, 1: 5}, 20) == {0: 5, 1: 5}
    assert limited({0: 0, 1: 0}, {0: 30, 1: 10}, 8) == {0: 6, 1: 2}
    shares = limited({0: 10, 1: 0, 2: 3}, {0: 11, 1: 100, 2: 3}, 7)
    assert sum(shares[p] - s for p, s in {0: 10, 1: 0, 2: 3}.items()) == 7
    assert shares[2] == 3


def test_source_options() -> None:
    base = {"topic": "t", "bootstrap": "127.0.0.1:1"}
    aligned = {**base, "zookeeper": "127.0.0.1:2", "job": "j", "checkpointLocation": "/tmp/c"}
    options = SourceOptions.parse({**aligned, "startingEpoch": "5", "mappingRetention": "7"})
    assert (options.mode, options.starting_epoch, options.mapping_retention) == ("aligned", 5, 7)
    unaligned = SourceOptions.parse(
        {**base, "mode": "unaligned", "startingOffsets": '{"t": {"0": 3, "1": -2}}'}
    )
    assert unaligned.starting_offsets == {0: 3, 1: -2}
    with pytest.raises(InvalidOption, match="offsets log"):
        SourceOptions.parse({k: v for k, v in aligned.items() if k != "checkpointLocation"})
    for bad in (
        {**aligned, "mode": "sideways"},
        {**aligned, "startingEpoch": "-1"},
        {**base, "mode": "unaligned", "maxOffsetsPerTrigger": "10"},
        {**base, "mode": "unaligned", "startingOffsets": '{"other": {"0": 1}}'},
    ):
        with pytest.raises(InvalidOption):
            SourceOptions.parse(bad)
