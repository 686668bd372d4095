"""What every command prints through: the two consoles, exit codes, failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc
import typer
from rich.console import Console
from rich.text import Text

from epochstate.cli.output import one_line
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
    grpc.StatusCode.ALREADY_EXISTS: 5,
    grpc.StatusCode.ABORTED: 5,
    grpc.StatusCode.UNAVAILABLE: 6,
    grpc.StatusCode.UNAUTHENTICATED: 7,
    grpc.StatusCode.PERMISSION_DENIED: 7,
}

T = TypeVar("T")


def fail(message: str, code: int) -> typer.Exit:
    """Print ``error: <message>`` on stderr, on one line whatever the message holds
    (newlines are folded, brackets are not markup, nothing wraps), and return the
    ``typer.Exit`` to raise with ``code``."""
    line = Text.assemble(("error:", "red"), " ", one_line(message))
    err.print(line, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def client_error_line(error: EpochStateClientError) -> str:
    """``error`` for the one error line: its message, then the daemon's reason
    (when it sent one) in brackets."""
    return f"{error} [{error.reason}]" if error.reason else str(error)


def run_client(action: Callable[[], T]) -> T:
    """``action()``; a client error ends the command with one line and the exit code
    of its status code."""
    try:
        return action()
    except EpochStateClientError as error:
        raise fail(client_error_line(error), EXIT_BY_CODE.get(error.code, 1)) from None
