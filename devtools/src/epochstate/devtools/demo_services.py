"""What the Kafka demos (``demo-chain``, ``demo-swap``) run beside their Spark jobs: an
embedded ZooKeeper, a Kafka broker (tansu) and a daemon joined to that ZooKeeper."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from epochstate.devtools.kafka_broker import TansuProcess
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.log_files import LogFiles
from epochstate.devtools.zookeeper import EmbeddedZooKeeper


@dataclass(frozen=True)
class DemoServices:
    zookeeper: EmbeddedZooKeeper
    broker: TansuProcess
    daemon: LocalDaemon


def log_paths(logs: LogFiles) -> list[Path]:
    """The logs a demo run writes, in the order the demos list them."""
    return [logs.spark, logs.spark_console, logs.daemon, logs.zookeeper, logs.kafka_broker, logs.demo]


def start_services(stack: ExitStack, directory: Path, logs: LogFiles, console: Console) -> DemoServices:
    """Start the three under ``directory``, each stopped when ``stack`` closes, showing progress
    on ``console`` and then where they listen and log."""
    with console.status("starting ZooKeeper, the Kafka broker and the daemon"):
        zookeeper = stack.enter_context(EmbeddedZooKeeper(directory / "zookeeper", log_path=logs.zookeeper))
        broker = stack.enter_context(TansuProcess(directory / "kafka", log_path=logs.kafka_broker))
        daemon = LocalDaemon(
            directory / "daemon", {}, zookeeper=zookeeper.connect_string, log_path=logs.daemon
        ).start(timeout=120)
        stack.callback(daemon.stop)
    console.print(
        f"[green]✓[/green] ZooKeeper {zookeeper.connect_string}, Kafka (tansu) {broker.bootstrap}, "
        f"daemon {daemon.target}\n  logs: {logs.names(*log_paths(logs))}"
    )
    return DemoServices(zookeeper, broker, daemon)
