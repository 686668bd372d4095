"""Tables never truncate: tab-separated when piped, records on a narrow terminal."""

from __future__ import annotations

import re

from tests.cli.conftest import KEY_SCHEMA, Served
from tests.cli.invoke import epochstate, epochstate_on_terminal

VALUE_SCHEMA = "struct<count:bigint,sum:bigint>"  # the aggregation's buffer
HEADERS = ["operator", "name", "store", "kind", "partitions", "from epoch", "key schema", "value schema"]


def test_describe_piped_is_tab_separated_and_complete(served: Served) -> None:
    done = epochstate(served.daemon.target, "describe", "spend")
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout and "..." not in done.stdout.replace(f"epochs 0..{served.newest()}", "")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("job spend  query ") and lines[1].startswith("checkpoint ")
    header, row = (line.split("\t") for line in lines[2:])
    assert header == HEADERS
    assert row[6:] == [KEY_SCHEMA, VALUE_SCHEMA]


def test_reads_piped_are_tab_separated(served: Served) -> None:
    done = epochstate(served.daemon.target, "scan", "spend", "--limit", "1")
    assert done.returncode == 0, done.stderr
    header, row = (line.split("\t") for line in done.stdout.splitlines())
    assert header == ["epoch", "key", "found", "value", "partition"]
    assert row[1].startswith('{"customer_region_identifier":"eu-west",') and row[2] == "yes"


def test_a_wide_terminal_gets_a_table(served: Served) -> None:
    code, shown = epochstate_on_terminal(served.daemon.target, 300, "describe", "spend")
    assert code == 0, shown
    assert "…" not in shown
    [row] = [line for line in shown.splitlines() if KEY_SCHEMA in line]
    assert "│" in row and VALUE_SCHEMA in row


def test_a_narrow_terminal_gets_records_in_full(served: Served) -> None:
    code, shown = epochstate_on_terminal(served.daemon.target, 40, "describe", "spend")
    assert code == 0, shown
    assert "…" not in shown and "│" not in shown
    records = [re.match(r"(\S.*?)(?:\s{2,}(.*))?$", line) for line in shown.splitlines()[2:]]
    fields = {m[1]: m[2] or "" for m in records if m}
    schemas = (fields["key schema"], fields["value schema"])
    assert (fields["operator"], schemas) == ("0", (KEY_SCHEMA, VALUE_SCHEMA)), shown
