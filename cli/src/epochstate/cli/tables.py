"""Rows with named columns, laid out for whoever reads stdout. Never truncated.

* stdout is a pipe or a file: tab-separated values, a header line first (as
  ``gh`` does when piped): one record per line, every cell in full, ready for
  ``cut``, ``awk`` or ``column -t``. Tabs and newlines inside a cell become spaces.
* a terminal wide enough for the table: a table, every cell on one line.
* a terminal too narrow for it: one block per row, ``column  value`` per line
  (as ``psql``'s expanded display), the terminal wrapping long values; nothing
  is cut or ellipsized.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

from epochstate.cli.output import is_terminal, print_line

Row = Sequence[str]
_UNLIMITED = 1 << 30


def print_table(headers: Sequence[str], rows: Sequence[Row]) -> None:
    """``rows`` (one string per header) on stdout, laid out as the module says."""
    if not is_terminal():
        print_line("\t".join(_cell(h) for h in headers))
        for row in rows:
            print_line("\t".join(_cell(c) for c in row))
        return
    console = Console(highlight=False)
    # overflow="fold" as well: should the measurement ever fall short, a cell folds
    # onto the next line rather than losing its end to an ellipsis.
    table = Table(*(Column(h, overflow="fold") for h in headers))
    for row in rows:
        table.add_row(*(Text(c) for c in row))  # cells are data: no markup, no emoji codes
    # Measured as if the terminal were unlimited: the width the table needs with
    # every cell on one line (a measurement within the terminal is capped by it).
    unlimited = console.options.update_width(_UNLIMITED)
    if Measurement.get(console, unlimited, table).maximum <= console.width:
        console.print(table)
        return
    width = max(len(h) for h in headers)
    for index, row in enumerate(rows):
        if index:
            print_line()
        for header, cell in zip(headers, row, strict=True):
            print_line(f"{header:<{width}}  {cell}".rstrip())


def _cell(text: str) -> str:
    return text.replace("\t", " ").replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
