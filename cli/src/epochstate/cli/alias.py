"""``epochstate alias``: logical job names that follow the hot-swaps of an output subject.

``set`` defines an alias (``orders``) of the job writing an output subject now;
each swap of that subject, once committed, moves it to the swap's new job from
the swap epoch on (docs/swap.md#aliases). ``show`` prints which job answers which
epochs, ``list`` the aliases, ``delete`` removes one. Straight on ZooKeeper.
Exit codes: 0 success; 2 bad usage; 3 no such alias; 4 refused (the name is a
job's, AMBIGUOUS_NAME; the job reads no input aligned) or a bad name; 6 ZooKeeper
unavailable; 1 ZooKeeper refused the credentials.

With ``--json``, ``set`` and ``show`` print ``{"name", "subject", "input", "jobs":
[{"job", "from_epoch", "to_epoch", "swap"}], "undecided_after", "pending_swap"}``
(epochs are the input subject's; null: open), ``list`` ``{"aliases": [...]}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from epochstate.cli.align_control import AlignFailure
from epochstate.cli.console import fail
from epochstate.cli.output import print_document, print_line
from epochstate.cli.zookeeper_options import AuthFileOpt, RootOpt, ZooKeeperOpt

if TYPE_CHECKING:
    from epochstate.core.alias.chain import AliasChain
    from epochstate.core.alias.registry import AliasRegistry

alias_app = typer.Typer(
    name="alias",
    help="Logical job names that follow the hot-swaps of an output subject: set, show, list, delete.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
T = TypeVar("T")

NameArg = Annotated[str, typer.Argument(help="the alias (a logical job name)")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="seconds to wait for ZooKeeper")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document instead of text")]


def chain_row(chain: AliasChain) -> dict[str, Any]:
    alias, pending = chain.alias, chain.pending
    return {
        "name": alias.name,
        "subject": alias.subject,
        "input": alias.input,
        "jobs": [
            {
                "job": s.job,
                "from_epoch": None if s.after is None else s.after + 1,
                "to_epoch": s.until,
                "swap": s.swap,
            }
            for s in chain.segments
        ],
        "undecided_after": None if pending is None else pending.epoch,
        "pending_swap": None if pending is None else pending.id,
    }


def _on_zookeeper(
    zookeeper: str, root: str, timeout: float, auth_file: Path | None, action: Callable[[AliasRegistry], T]
) -> T:
    from epochstate.cli.align_zookeeper import exit_code
    from epochstate.cli.zookeeper_session import connect
    from epochstate.core.alias.errors import AliasError, AliasNotFound
    from epochstate.core.alias.registry import AliasRegistry
    from epochstate.core.alignment.errors import AlignmentError
    from epochstate.core.zookeeper.errors import AccessDenied, RegistryError

    client = connect(zookeeper, auth_file, timeout)
    try:
        return action(AliasRegistry(client, root, timeout=timeout))
    except AliasNotFound as error:
        raise AlignFailure(f"{error.reason}: {error}", 3) from None
    except AliasError as error:
        raise AlignFailure(f"{error.reason}: {error}", 4) from None
    except AlignmentError as error:
        raise AlignFailure(str(error), exit_code(error)) from None
    except (AccessDenied, RegistryError) as error:
        raise AlignFailure(str(error), 1 if isinstance(error, AccessDenied) else 4) from None
    finally:
        client.stop()
        client.close()


def _run(action: Callable[[], T]) -> T:
    try:
        return action()
    except AlignFailure as failure:
        raise fail(str(failure), failure.code) from None


def _show(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_document(row)
        return
    print_line(f"alias {row['name']!r}: output {row['subject']!r}, epochs of input {row['input']!r}")
    for job in row["jobs"]:
        first = "the first" if job["from_epoch"] is None else job["from_epoch"]
        last = "on" if job["to_epoch"] is None else f"to {job['to_epoch']}"
        swap = "" if job["swap"] is None else f" (swap {job['swap']})"
        print_line(f"  {job['job']}: epochs from {first} {last}{swap}")
    if row["undecided_after"] is not None:
        print_line(f"  epochs after {row['undecided_after']}: swap {row['pending_swap']} not decided yet")


def _chain(registry: AliasRegistry, name: str) -> AliasChain:
    from epochstate.core.alias.errors import AliasNotFound

    chain = registry.chain(name)
    if chain is None:
        raise AliasNotFound(f"no alias {name!r}")
    return chain


@alias_app.command("set")
def set_alias(
    name: NameArg,
    job: Annotated[str, typer.Option("--job", help="the job writing the output subject now")],
    subject: Annotated[str, typer.Option("--subject", "-s", help="the output subject whose swaps move it")],
    input: Annotated[
        str, typer.Option("--input", help="the input its jobs read aligned (default: the job's only one)")
    ] = "",
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Define alias NAME of --job, moved on by the swaps of --subject (replacing its definition)."""

    def define(registry: AliasRegistry) -> dict[str, Any]:
        from epochstate.core.alias.errors import BadAlias
        from epochstate.core.alias.records import AliasRecord

        inputs = registry.aligned_inputs(job)
        chosen = input or (inputs[0] if len(inputs) == 1 else "")
        if chosen not in inputs:
            reads = ", ".join(inputs) or "none"
            raise BadAlias(
                f"job {job!r} reads {'no ' + repr(input) if input else 'not exactly one input'} "
                f"aligned (it reads aligned: {reads}); name the input with --input"
            )
        try:
            record = AliasRecord(name, job, subject, chosen, int(time.time() * 1000))
        except ValueError as error:
            raise BadAlias(str(error)) from None
        registry.define(record)
        return chain_row(_chain(registry, name))

    _show(_run(lambda: _on_zookeeper(zookeeper, root, timeout, zookeeper_auth_file, define)), as_json)


@alias_app.command()
def show(
    name: NameArg,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show which job answers which epochs of alias NAME."""
    row = _run(
        lambda: _on_zookeeper(
            zookeeper, root, timeout, zookeeper_auth_file, lambda r: chain_row(_chain(r, name))
        )
    )
    _show(row, as_json)


@alias_app.command("list")
def list_aliases(
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the aliases."""
    names = _run(lambda: _on_zookeeper(zookeeper, root, timeout, zookeeper_auth_file, lambda r: r.names()))
    if as_json:
        print_document({"aliases": names})
    else:
        for name in names:
            print_line(name)


@alias_app.command()
def delete(
    name: NameArg,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    zookeeper_auth_file: AuthFileOpt = None,
) -> None:
    """Delete alias NAME (its jobs and their swaps stay as they are)."""
    _run(lambda: _on_zookeeper(zookeeper, root, timeout, zookeeper_auth_file, lambda r: r.delete(name)))
    print_line(f"alias {name!r} deleted")
