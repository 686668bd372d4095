"""``epochstate daemon``: the one command that imports the daemon."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from epochstate.cli.console import fail
from epochstate.cli.json_logs import JsonLines


def daemon(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML/JSON config file")] = None,
    listen: Annotated[str | None, typer.Option(help="gRPC listen address host:port")] = None,
    listen_unix: Annotated[
        str | None,
        typer.Option(help="gRPC Unix socket, relative to --data-dir ('': none; default epochstate.sock)"),
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="directory for the store")] = None,
    zookeeper: Annotated[str | None, typer.Option(help="ZooKeeper connect string")] = None,
    zookeeper_auth_file: Annotated[
        Path | None,
        typer.Option(
            help="file with one line user:password: the ZooKeeper digest identity (docs/zookeeper.md)"
        ),
    ] = None,
    node: Annotated[str | None, typer.Option(help="node name in ZooKeeper")] = None,
    advertise: Annotated[
        str | None,
        typer.Option(help="host:port registered in ZooKeeper for others to reach (default: --listen)"),
    ] = None,
    health_listen: Annotated[
        str | None,
        typer.Option(help="host:port of a plaintext listener for grpc.health.v1 Check only (probes)"),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            help="join this group of daemons: follow the jobs its leader assigns (needs --zookeeper)"
        ),
    ] = None,
    job: Annotated[list[str] | None, typer.Option(help="NAME=CHECKPOINT to follow (repeatable)")] = None,
    address_file: Annotated[
        Path | None, typer.Option(help="write host:port (and unix:///path) here, one a line, once serving")
    ] = None,
    poll_interval: Annotated[float | None, typer.Option(help="seconds between checkpoint looks")] = None,
    retention_epochs: Annotated[int | None, typer.Option(help="how many epochs to keep")] = None,
    serve_processes: Annotated[
        int | None,
        typer.Option(help="gRPC serving processes sharing the port (0: one per CPU the daemon may use)"),
    ] = None,
    log_level: Annotated[str, typer.Option(envvar="EPOCHSTATE_LOG_LEVEL")] = "INFO",
    log_format: Annotated[
        str,
        typer.Option(envvar="EPOCHSTATE_LOG_FORMAT", help="text, or json: one JSON object a line"),
    ] = "text",
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="serve beyond loopback without TLS and auth (anyone on the network may call anything)",
        ),
    ] = False,
) -> None:
    """Run the daemon (settings: defaults < --config file < EPOCHSTATE_* env < options)."""
    try:
        from epochstate.daemon.config import ConfigError, JobConfig, load_settings
        from epochstate.daemon.runtime import DaemonStartFailed, run
    except ImportError as error:
        raise fail(f"the daemon needs its extra: pip install 'epochstate[daemon]' ({error})", 1) from None

    _configure_logging(log_level, log_format)
    jobs_given = None
    if job:
        jobs_given = []
        for spec in job:
            name, sep, checkpoint = spec.partition("=")
            if not sep or not name or not checkpoint:
                raise fail(f"--job takes NAME=CHECKPOINT, got {spec!r}", 2)
            jobs_given.append(JobConfig(name=name, checkpoint=checkpoint))
    try:
        settings = load_settings(
            config,
            listen=listen,
            listen_unix=listen_unix,
            data_dir=data_dir,
            zookeeper=zookeeper,
            zookeeper_auth_file=zookeeper_auth_file,
            node=node,
            advertise=advertise,
            health_listen=health_listen,
            group=group,
            jobs=jobs_given,
            poll_interval=poll_interval,
            retention_epochs=retention_epochs,
            serve=None if serve_processes is None else {"processes": serve_processes},
            insecure=insecure or None,
        )
    except ConfigError as error:
        raise fail(str(error), 2) from None

    def announce(targets: Sequence[str]) -> None:
        if address_file is not None:
            tmp = address_file.with_suffix(".tmp")
            tmp.write_text("".join(t + "\n" for t in targets))
            os.replace(tmp, address_file)

    try:
        run(settings, on_serving=announce)
    except DaemonStartFailed as error:
        raise fail(str(error), 1) from None


LOG_FORMATS = ("text", "json")


def _configure_logging(level_name: str, log_format: str = "text") -> None:
    """``level_name`` for epochstate's own loggers; INFO at most for every library's; lines as
    ``log_format`` says (``text``, or ``json``: :class:`~epochstate.cli.json_logs.JsonLines`).

    Storage clients log whole requests at DEBUG, credential headers included
    (botocore's canonical request carries an AWS session token), so their DEBUG
    never reaches the log, whatever the level asked for.
    """
    level = logging.getLevelName(level_name.upper())
    if not isinstance(level, int):
        raise fail(f"--log-level: unknown level {level_name!r}", 2)
    if log_format.lower() not in LOG_FORMATS:
        raise fail(f"--log-format: {log_format!r} is not one of {', '.join(LOG_FORMATS)}", 2)
    handler = logging.StreamHandler()
    if log_format.lower() == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=max(level, logging.INFO), handlers=[handler])
    logging.getLogger("epochstate").setLevel(level)
