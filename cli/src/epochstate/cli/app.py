"""The ``epochstate`` command line (entry point :func:`main`).

Output: a table on a terminal; tab-separated lines with a header when stdout is
a pipe or a file; never truncated (see :mod:`epochstate.cli.tables`). With
``--json``, ``get``, ``scan``, ``history``, ``changes`` and ``watch`` print one
JSON object per line (NDJSON), every other command exactly one JSON document; the
fields are listed in :mod:`~epochstate.cli.reads`, :mod:`~epochstate.cli.over_time`,
:mod:`~epochstate.cli.jobs`, :mod:`~epochstate.cli.watch` and :mod:`~epochstate.cli.align`.

Errors are one line on stderr, ``error: <message>``, usage errors included;
nothing of a failed command goes to stdout.

Exit codes: 0 success; 1 unexpected error; 2 bad usage; 3 not found; 4 invalid
argument (e.g. a key that does not match the key schema); 5 epoch not available
(not committed yet, older than retention, or deadline passed); 6 daemon
unavailable; 7 not allowed (no or unknown credentials, a missing role); 130
interrupted (Ctrl-C). A command group without arguments
(``epochstate``, ``epochstate align``) prints its help and exits 0.
``EPOCHSTATE_DEBUG=1`` shows the traceback of an unexpected error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import typer

from epochstate.cli.alias import alias_app
from epochstate.cli.align import align_app
from epochstate.cli.connection import tls_options
from epochstate.cli.console import fail
from epochstate.cli.daemon_command import daemon
from epochstate.cli.dev_commands import demo, demo_chain, demo_swap, zookeeper
from epochstate.cli.group_jobs import jobs_app
from epochstate.cli.health import health
from epochstate.cli.jobs import describe, epochs
from epochstate.cli.over_time import changes, history
from epochstate.cli.reads import get, scan
from epochstate.cli.secure_zookeeper import secure_zookeeper
from epochstate.cli.swap import swap_app
from epochstate.cli.watch import watch

app = typer.Typer(
    name="epochstate",
    help="Epoch-pinned, repeatable lookups into the state of Spark streaming jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.callback()(tls_options)
app.command()(get)
app.command()(scan)
app.command()(history)
app.command()(changes)
app.add_typer(jobs_app, name="jobs")
app.command()(describe)
app.command()(epochs)
app.command()(watch)
app.command()(health)
app.add_typer(align_app, name="align")
app.add_typer(swap_app, name="swap")
app.add_typer(alias_app, name="alias")
app.command()(daemon)
app.command()(zookeeper)
app.command("secure-zookeeper")(secure_zookeeper)
app.command()(demo)
app.command("demo-chain")(demo_chain)
app.command("demo-swap")(demo_swap)


def run(args: Sequence[str] | None = None) -> int:
    """Run the command line on ``args`` (default: ``sys.argv[1:]``); the exit code."""
    try:
        code = app(args=args, prog_name="epochstate", standalone_mode=False)
    except typer.Abort:
        return 1
    except Exception as error:
        parsed = _parser_error(error)
        if parsed is not None:
            return parsed
        if os.environ.get("EPOCHSTATE_DEBUG"):
            raise
        fail(f"unexpected {type(error).__name__}: {error} (EPOCHSTATE_DEBUG=1 shows the traceback)", 1)
        return 1
    return code if isinstance(code, int) else 0


def _parser_error(error: Exception) -> int | None:
    """The exit code of an error of the command-line parser (click's
    ``ClickException``: typer vendors click, so it is not importable by one name
    across typer versions), after printing it as one line; None for other errors."""
    exit_code = getattr(error, "exit_code", None)
    format_message = getattr(error, "format_message", None)
    if not isinstance(exit_code, int) or not callable(format_message):
        return None
    message = str(format_message())
    if type(error).__name__ == "NoArgsIsHelpError":
        # No arguments ask for the help (as with kubectl and gh, not an error): typer's
        # rich help has printed itself already (the message is empty), click's plain
        # help is the message.
        if message:
            sys.stdout.write(message + "\n")
        return 0
    ctx = getattr(error, "ctx", None)
    path = getattr(ctx, "command_path", None)
    hint = f" (see '{path} --help')" if exit_code == 2 and path else ""
    fail(message + hint, exit_code)
    return exit_code


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
