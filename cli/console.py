"""What every command prints through: the two consoles, exit codes, failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc
import typer
from rich.console import Console
from rich.markup import escape

from epochstate.client.errors import EpochStateClientError

out = Console()
err = Console(stderr=True)

EXIT_BY_CODE = {
    grpc.StatusCode.NOT_FOUND: 3,
    grpc.StatusCode.INVALID_ARGUMENT: 4,
    grpc.StatusCode.FAILED_PRECONDITION: 5,
    grpc.StatusCode.OUT_OF_RANGE: 5,
    grpc.StatusCode.DEADLINE_EXCEEDED: 5,
    grpc.StatusCode.DATA_LOSS: 5,
    grpc.StatusCode.UNAVAILABLE: 6,
}

T = TypeVar("T")


def fail(message: str, code: int) -> typer.Exit:
    """Print ``error: <message>`` as one line on stderr (never wrapped, never read as
    markup) and return the exit to raise."""
    one_line = " ".join(message.split())
    err.print(f"[red]error:[/red] {escape(one_line)}", highlight=False, markup=True, soft_wrap=True)
    return typer.Exit(code)


def one_line(error: EpochStateClientError) -> str:
    """``error`` on one line: the daemon's reason (when it sent one), then the message."""
    message = " ".join(str(error).split())
    return f"{message} [{error.reason}]" if error.reason else message


def run_client(action: Callable[[], T]) -> T:
    """``action()``; a client error ends the command with one line and the exit code of its status code."""
    try:
        return action()
    except EpochStateClientError as error:
        raise fail(one_line(error), EXIT_BY_CODE.get(error.code, 1)) from None
