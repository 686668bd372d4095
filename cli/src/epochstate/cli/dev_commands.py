"""Development commands: a local ZooKeeper and the demos (they need the spark extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from epochstate.cli.console import fail


def zookeeper(
    port: Annotated[int, typer.Option(help="client port (0: any free port)")] = 2181,
    data_dir: Annotated[Path, typer.Option(help="ZooKeeper data directory")] = Path("var/zookeeper"),
) -> None:
    """Run a local ZooKeeper server from the jars the pyspark wheel ships."""
    from epochstate.devtools.zookeeper import run_forever

    run_forever(port, data_dir)


def demo(
    duration: Annotated[float, typer.Option(help="seconds to keep asking (default: two minutes)")] = 120.0,
    interval: Annotated[float, typer.Option(help="seconds between asks")] = 30.0,
    trigger: Annotated[float, typer.Option(help="the job's trigger interval in seconds")] = 2.0,
    workdir: Annotated[Path, typer.Option(help="where the demo keeps its files")] = Path("var/demo"),
) -> None:
    """Run everything locally: ZooKeeper, the daemon, a Spark job, pinned lookups."""
    try:
        from epochstate.devtools.demo import DemoOptions, run
    except ImportError as error:
        raise fail(f"the demo needs the spark extra: pip install 'epochstate[spark]' ({error})", 1) from None
    options = DemoOptions(workdir=workdir, duration=duration, interval=interval, trigger_seconds=trigger)
    raise typer.Exit(run(options))


def demo_chain(
    duration: Annotated[float, typer.Option(help="seconds to follow job 2 after its first batch")] = 60.0,
    trigger: Annotated[float, typer.Option(help="job 1's trigger interval in seconds")] = 2.0,
    workdir: Annotated[Path, typer.Option(help="where the demo keeps its files")] = Path("var/demo-chain"),
) -> None:
    """Two chained jobs with aligned epochs (hot issues -> pull-request hotness) and lookups across them."""
    try:
        from epochstate.devtools.chain_demo.run import ChainDemoOptions, run
    except ImportError as error:
        raise fail(f"the demo needs the spark extra: pip install 'epochstate[spark]' ({error})", 1) from None
    raise typer.Exit(run(ChainDemoOptions(workdir=workdir, duration=duration, trigger_seconds=trigger)))


def demo_swap(
    trigger: Annotated[float, typer.Option(help="the jobs' trigger interval in seconds")] = 1.0,
    epochs_after: Annotated[
        int, typer.Option(help="epochs v2 writes after the swap before the demo stops")
    ] = 3,
    workdir: Annotated[Path, typer.Option(help="where the demo keeps its files")] = Path("var/demo-swap"),
) -> None:
    """Hot-swap a counting job for its new version (v1 -> v2) while a downstream job reads its output."""
    try:
        from epochstate.devtools.swap_demo.run import SwapDemoOptions, run
    except ImportError as error:
        raise fail(f"the demo needs the spark extra: pip install 'epochstate[spark]' ({error})", 1) from None
    raise typer.Exit(
        run(SwapDemoOptions(workdir=workdir, trigger_seconds=trigger, epochs_after=epochs_after))
    )
