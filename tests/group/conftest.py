"""Group tests run against the real ZooKeeper of tests.fixtures.zookeeper, with several sessions:
in-process members (one KazooClient each) and members in child processes that a test kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from epochstate.core.zookeeper.group_records import Assignment
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.assignments import read_assignment
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.group.member import GroupMember, Shards
from tests.fixtures.zookeeper import EXPIRING_SESSION_TIMEOUT

GROUP = "main"
LAYOUT = Layout()
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ChildMember:
    """A member in a child process (tests/group/member_process.py)."""

    node: str
    process: subprocess.Popen[str]

    def kill(self) -> None:
        """kill -9: the session stays until ZooKeeper expires it."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@dataclass
class GroupHarness:
    """Members of group ``main`` on this test's chroot, and what they saw."""

    connect: str
    make_client: Callable[..., KazooClient]
    members: dict[str, GroupMember] = field(default_factory=dict)
    children: dict[str, ChildMember] = field(default_factory=dict)
    changes: dict[str, list[Shards]] = field(default_factory=dict)
    reader: KazooClient | None = None

    def admin(self) -> JobDefinitions:
        return JobDefinitions(self.make_client(), LAYOUT, GROUP)

    def join(self, node: str, client: KazooClient | None = None) -> GroupMember:
        """A member with a client (a session) of its own (``client`` if given), joined."""
        self.changes[node] = []
        member = GroupMember(
            client or self.make_client(),
            LAYOUT,
            GROUP,
            node,
            address=f"{node}.test:7070",
            version="test",
            on_change=lambda _, shards: self.changes[node].append(shards),
            debounce=0.1,
        )
        self.members[node] = member
        assert member.start(timeout=30)
        return member

    def spawn(self, node: str) -> ChildMember:
        """A member in a child process, joined; its session is short, as it is there to be killed."""
        timeout = str(EXPIRING_SESSION_TIMEOUT)
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.group.member_process", self.connect, GROUP, node, timeout],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "joined"
        child = ChildMember(node, process)
        self.children[node] = child
        return child

    def assignment(self) -> Assignment | None:
        if self.reader is None:
            self.reader = self.make_client()
        return read_assignment(self.reader, LAYOUT, GROUP)[0]

    def close(self) -> None:
        for member in self.members.values():
            member.stop(10)
        for child in self.children.values():
            if child.process.poll() is None:
                child.process.kill()
                child.process.wait(timeout=30)


@pytest.fixture
def harness(zk_connect: str, make_zk_client: Callable[..., KazooClient]) -> Iterator[GroupHarness]:
    group = GroupHarness(zk_connect, make_zk_client)
    yield group
    group.close()
