"""The plain-text table every benchmark prints (columns padded to their widest cell)."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
