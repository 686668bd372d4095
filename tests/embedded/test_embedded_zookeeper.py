"""The embedded ZooKeeper server the registry tests run against."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from epochstate.devtools.classpath import CLASSPATH_ENV, zookeeper_classpath
from epochstate.devtools.errors import JavaNotFound, ZooKeeperStartFailed
from epochstate.devtools.zookeeper import EmbeddedZooKeeper, four_letter_word
from tests.fixtures.zookeeper import new_test_client


def test_serves_on_loopback(zookeeper_server: EmbeddedZooKeeper) -> None:
    assert zookeeper_server.running
    assert zookeeper_server.connect_string == f"127.0.0.1:{zookeeper_server.port}"
    status = four_letter_word(zookeeper_server.port, "srvr")
    assert "Mode: standalone" in status and "3.9" in status
    assert four_letter_word(zookeeper_server.port, "ruok") == "imok"
    config = zookeeper_server.config_path.read_text()
    assert "clientPortAddress=127.0.0.1" in config and "admin.enableServer=false" in config


def test_restart_keeps_port_and_data(private_zookeeper_server: EmbeddedZooKeeper) -> None:
    server = private_zookeeper_server
    port = server.port
    client = new_test_client(server.connect_string)
    client.start()
    try:
        client.create("/kept", b"data")
        server.kill()
        assert not server.running
        server.restart()
        assert server.port == port
        assert client.retry(client.get, "/kept")[0] == b"data"
    finally:
        client.stop()
        client.close()
    server.stop()
    assert not server.running and server.pid is None


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path, java=str(tmp_path / "no-such-java"))
    with pytest.raises(JavaNotFound, match="no-such-java"):
        server.start()


def test_no_java_on_path_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFound, match="JAVA_HOME"):
        EmbeddedZooKeeper(tmp_path).start()


def test_classpath_override_and_failure_report_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLASSPATH_ENV, str(tmp_path / "empty"))
    assert zookeeper_classpath() == str(tmp_path / "empty")
    assert zookeeper_classpath("/explicit/*") == "/explicit/*"
    server = EmbeddedZooKeeper(tmp_path / "zk")
    with pytest.raises(ZooKeeperStartFailed, match="ZooKeeperServerMain"):
        server.start()
    assert not server.running


def test_default_classpath_comes_from_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLASSPATH_ENV, raising=False)
    classpath = zookeeper_classpath()
    assert "pyspark" in classpath and "zookeeper-" in classpath


def test_run_forever_serves_until_terminated(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import sys\n"
        "from epochstate.devtools.zookeeper import run_forever\n"
        f"sys.exit(run_forever({port}, {str(tmp_path / 'zk')!r}))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert f"127.0.0.1:{port}" in line, line
        assert four_letter_word(port, "ruok") == "imok"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        with pytest.raises(OSError):
            four_letter_word(port, "ruok")
    finally:
        process.kill()
        process.wait()
