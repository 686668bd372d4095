"""A network namespace of the test's own, joined to this one by two veth pairs.

One pair carries gRPC (the test reaches a daemon run in the namespace), the other
carries ZooKeeper (a server bound to this side's address of that pair). Taking the
namespace's end of the ZooKeeper pair down is a real partition: the daemon's
packets to ZooKeeper have no route and ZooKeeper's to it are dropped, while gRPC
still flows over the other pair. Needs root (``ip netns``); nothing else is touched.
"""

from __future__ import annotations

import fcntl
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Test processes (pytest-xdist workers) make namespaces one at a time, each on a subnet
# no interface here has yet.
_LOCK = Path("/tmp/epochstate-tests-netns.lock")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Netns:
    name: str
    grpc_host: str  # this side of the gRPC pair
    grpc_inside: str  # the namespace's side: a daemon inside listens there
    zookeeper_host: str  # this side of the ZooKeeper pair: ZooKeeper listens there
    _zookeeper_inside_link: str

    @classmethod
    def create(cls) -> Netns:
        with _LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return cls._create()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @classmethod
    def _create(cls) -> Netns:
        tag = f"{random.randrange(16**5):05x}"
        taken = subprocess.run(["ip", "-o", "-4", "addr"], check=True, capture_output=True, text=True).stdout
        octet = random.choice([o for o in range(1, 250) if f"10.231.{o}." not in taken])
        name = f"es-{tag}"
        made = cls(name, f"10.231.{octet}.1", f"10.231.{octet}.2", f"10.232.{octet}.1", f"ezn{tag}")
        _ip("netns", "add", name)
        try:
            made._pair(f"egh{tag}", f"egn{tag}", made.grpc_host, made.grpc_inside)
            made._pair(f"ezh{tag}", made._zookeeper_inside_link, made.zookeeper_host, f"10.232.{octet}.2")
            _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        except BaseException:
            made.delete()
            raise
        return made

    def _pair(self, host_link: str, inside_link: str, host_address: str, inside_address: str) -> None:
        _ip("link", "add", host_link, "type", "veth", "peer", "name", inside_link)
        _ip("link", "set", inside_link, "netns", self.name)
        _ip("addr", "add", f"{host_address}/30", "dev", host_link)
        _ip("link", "set", host_link, "up")
        _ip("netns", "exec", self.name, "ip", "addr", "add", f"{inside_address}/30", "dev", inside_link)
        _ip("netns", "exec", self.name, "ip", "link", "set", inside_link, "up")

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a process inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut_zookeeper(self) -> None:
        """Take the namespace's end of the ZooKeeper pair down."""
        _ip("netns", "exec", self.name, "ip", "link", "set", self._zookeeper_inside_link, "down")

    def delete(self) -> None:
        """Delete the namespace; its veth ends go with it, and so do their peers here."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
