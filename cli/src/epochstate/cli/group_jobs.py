"""``epochstate jobs ...``: the jobs a daemon follows, and the jobs of its group.

``epochstate jobs`` (or ``jobs list``) lists the jobs the daemon follows, as
before (:func:`epochstate.cli.jobs.jobs`). The subcommands manage the jobs of the
daemon's group through any member (``JobsAdmin``, role admin; docs/groups.md):
``add NAME CHECKPOINT [--replicas N] [--shards S] [--partitions P]``, ``remove``, ``pause``, ``resume``,
``restart NAME``, and ``status [--json]``.

``status --json`` prints one JSON document::

    {"group", "leader", "assignment_generation",
     "jobs": [{"job", "checkpoint", "replicas", "state", "restart_generation",
               "version", "shards", "partitions",
               "shard_ranges": [[first, last], ...], "missing_replicas",
               "replica_states": [{"node", "address", "state", "reason", "announced",
                                   "newest_epoch", "committed_epoch", "lag_epochs",
                                   "lag_seconds", "restart_generation"}]}]}

``partitions`` is null when not stated (one shard: every partition);
``shard_ranges`` gives each shard's Spark partitions ``[first, last]``.
A replica's ``state`` is ``following``, ``catching_up``, ``paused``, ``failed``
(``reason`` says why), ``down`` (its member is gone) or ``unknown`` (not reported
yet). The changes print the job's definition (``--json``: the same keys as a job
of ``status``, without ``missing_replicas`` and ``replica_states``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from grpc import StatusCode

from epochstate.cli.arguments import DEFAULT_TARGET, JsonOpt, TargetOpt, TimeoutOpt
from epochstate.cli.connection import connect
from epochstate.cli.console import EXIT_BY_CODE, fail, run_client
from epochstate.cli.jobs import jobs
from epochstate.cli.output import print_document, print_line
from epochstate.cli.tables import print_table
from epochstate.core.partition_ranges import shown_range
from epochstate.core.zookeeper.errors import InvalidDefinition
from epochstate.core.zookeeper.group_records import shard_ranges
from epochstate.v1 import epochstate_pb2 as pb

jobs_app = typer.Typer(
    help="The jobs the daemon follows (no subcommand: list them) and the jobs of its group.",
    invoke_without_command=True,
)

NameArg = Annotated[str, typer.Argument(help="job name")]
VersionOpt = Annotated[
    int | None, typer.Option(help="refuse the change unless the definition is at this version (status)")
]


@jobs_app.callback()
def jobs_list_default(
    ctx: typer.Context,
    target: TargetOpt = DEFAULT_TARGET,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """The jobs the daemon follows (without a subcommand), or the group's jobs (subcommands)."""
    if ctx.invoked_subcommand is None:
        jobs(target, as_json, timeout)


jobs_app.command("list")(jobs)


def shard_ranges_of(d: pb.JobDefinition) -> list[list[int]]:
    """Each shard's Spark partitions ``[first, last]``, as the group's leader splits them."""
    try:
        return [[first, last] for first, last in shard_ranges(d.shards or 1, d.partitions or None)]
    except InvalidDefinition:  # not written by a daemon of this version: shown as is
        return []


def definition_record(d: pb.JobDefinition) -> dict[str, Any]:
    return {
        "job": d.name,
        "checkpoint": d.checkpoint,
        "replicas": d.replicas,
        "state": d.state,
        "restart_generation": d.restart_generation,
        "version": d.version,
        "shards": d.shards or 1,
        "partitions": d.partitions or None,
        "shard_ranges": shard_ranges_of(d),
    }


def _shards_text(d: pb.JobDefinition) -> str:
    ranges = shard_ranges_of(d)
    if (d.shards or 1) == 1 and not d.partitions:
        return "1 shard (every partition)"
    listed = ", ".join(shown_range(first, last) for first, last in ranges)
    return f"{d.shards or 1} shard(s) of {d.partitions} partitions: {listed}"


def _print_definition(d: pb.JobDefinition, as_json: bool, what: str) -> None:
    if as_json:
        print_document(definition_record(d))
        return
    print_line(
        f"job {d.name} {what}: {d.state}, {d.replicas} replica(s), {_shards_text(d)}, restart generation "
        f"{d.restart_generation}, version {d.version}"
    )


@jobs_app.command()
def add(
    name: NameArg,
    checkpoint: Annotated[str, typer.Argument(help="the job's checkpoint (URI or absolute path)")],
    replicas: Annotated[int, typer.Option(min=1, help="how many daemons follow each shard")] = 1,
    shards: Annotated[
        int, typer.Option(min=1, help="split the job's Spark partitions into this many ranges")
    ] = 1,
    partitions: Annotated[
        int,
        typer.Option(
            min=0,
            help="the job's number of Spark partitions (default: learned from the checkpoint's state)",
        ),
    ] = 0,
    target: TargetOpt = DEFAULT_TARGET,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Define a job in the daemon's group: its leader assigns each of its SHARDS (ranges of
    its Spark partitions) to REPLICAS daemons, which ingest and serve those partitions only."""
    if partitions and shards > partitions:
        raise fail(
            f"{shards} shards cannot split {partitions} partitions", EXIT_BY_CODE[StatusCode.INVALID_ARGUMENT]
        )
    with connect(target, timeout) as client:
        added = run_client(
            lambda: client.group_jobs.add(
                name, checkpoint, replicas=replicas, shards=shards, partitions=partitions
            )
        )
    _print_definition(added, as_json, "added")


def _change(how: str, done: str) -> Any:
    def command(
        name: NameArg,
        expected_version: VersionOpt = None,
        target: TargetOpt = DEFAULT_TARGET,
        as_json: JsonOpt = False,
        timeout: TimeoutOpt = 10.0,
    ) -> None:
        with connect(target, timeout) as client:
            change = getattr(client.group_jobs, how)
            changed = run_client(lambda: change(name, expected_version=expected_version))
        _print_definition(changed, as_json, done)

    return command


jobs_app.command("remove", help="Remove a job from the group: its replicas stop and drop its data.")(
    _change("remove", "removed")
)
jobs_app.command("pause", help="Pause a job: its replicas ingest nothing new and serve what they hold.")(
    _change("pause", "paused")
)
jobs_app.command("resume", help="Resume a paused job.")(_change("resume", "resumed"))
jobs_app.command("restart", help="Restart a job: each replica re-opens it (its store kept).")(
    _change("restart", "restarted")
)


def status_record(response: pb.JobsStatusResponse) -> dict[str, Any]:
    """``jobs status --json``'s document (see the module docstring)."""
    return {
        "group": response.group,
        "leader": response.leader,
        "assignment_generation": response.assignment_generation,
        "jobs": [
            {
                **definition_record(job.definition),
                "missing_replicas": job.missing_replicas,
                "replica_states": [
                    {
                        "node": r.node,
                        "address": r.address,
                        "state": r.state,
                        "reason": r.reason,
                        "announced": r.announced,
                        "newest_epoch": r.newest_epoch,
                        "committed_epoch": r.committed_epoch,
                        "lag_epochs": r.lag_epochs,
                        "lag_seconds": r.lag_seconds,
                        "restart_generation": r.restart_generation,
                    }
                    for r in job.replicas
                ],
            }
            for job in response.jobs
        ],
    }


@jobs_app.command()
def status(
    job: Annotated[str, typer.Argument(help="one job (default: every job of the group)")] = "",
    target: TargetOpt = DEFAULT_TARGET,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Each job of the group: its definition and each replica's state and lag."""
    with connect(target, timeout) as client:
        response = run_client(lambda: client.group_jobs.status(job))
    document = status_record(response)
    if as_json:
        print_document(document)
        return
    print_line(f"group {response.group}  leader {response.leader or '-'}")
    for job_status in response.jobs:
        print_line(f"job {job_status.definition.name}: {_shards_text(job_status.definition)}")
    rows = []
    for j in document["jobs"]:
        for r in j["replica_states"] or [
            {"node": "-", "state": "unassigned", "lag_epochs": "", "lag_seconds": ""}
        ]:
            rows.append(
                (
                    j["job"],
                    j["state"],
                    str(r["node"]),
                    str(r["state"]) + (f" ({r['reason']})" if r.get("reason") else ""),
                    str(r["lag_epochs"]),
                    str(r["lag_seconds"]),
                )
            )
    print_table(("job", "job state", "replica", "replica state", "lag (epochs)", "lag (s)"), rows)
