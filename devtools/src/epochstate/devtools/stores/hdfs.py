"""HDFS: a real NameNode and DataNode (Apache Hadoop 2.7.3) as two JVMs on loopback,
read by the daemon over WebHDFS.

No registry ships a current Hadoop server: the pyspark wheels of Spark 3 and 4 carry
only the shaded client (``hadoop-client-api``: no NameNode, DataNode or WebHDFS
server classes). The last pyspark releases built on Hadoop 2.7 do carry the server
jar, ``hadoop-hdfs-2.7.3.jar``, and the libraries it needs, except Jersey 1, which
the WebHDFS server is written on and which Debian packages. So the cluster is made,
once per machine, in :func:`~epochstate.devtools.stores.base.cache_root`, from:

- the ``pyspark==2.4.8`` source distribution on PyPI (``pip download``): the jars in
  :data:`HADOOP_JARS`;
- Debian's ``libjersey1-{core,server,servlet}-java`` and ``libjsr311-api-java``
  (``apt-get download``, unpacked with ``dpkg-deb``; nothing is installed).

Hadoop 2.7's WebHDFS REST API is the one Hadoop 3 serves (``/webhdfs/v1``). The
NameNode's web UI pages are not in these jars; WebHDFS does not need them.
"""

from __future__ import annotations

import getpass
import json
import shutil
import sys
import tarfile
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Any

from epochstate.devtools.classpath import find_java
from epochstate.devtools.jvm_options import SMALL_JVM_OPTIONS
from epochstate.devtools.stores.base import (
    HOST,
    CheckpointStore,
    ServerProcess,
    StoreServerFailed,
    bucket_name,
    cache_root,
    free_port,
    install_lock,
    run_step,
)

HADOOP_VERSION = "2.7.3"
PYSPARK_SDIST = "pyspark==2.4.8"
# What the NameNode and DataNode load to serve WebHDFS (found with -Xlog:class+load).
HADOOP_JARS = (
    "hadoop-common-2.7.3.jar",
    "hadoop-hdfs-2.7.3.jar",
    "hadoop-auth-2.7.3.jar",
    "hadoop-annotations-2.7.3.jar",
    "guava-14.0.1.jar",
    "protobuf-java-2.5.0.jar",
    "htrace-core-3.1.0-incubating.jar",
    "netty-all-4.1.47.Final.jar",
    "jetty-6.1.26.jar",
    "jetty-util-6.1.26.jar",
    "javax.servlet-api-3.1.0.jar",
    "jackson-core-asl-1.9.13.jar",
    "jackson-mapper-asl-1.9.13.jar",
    "jaxb-api-2.2.2.jar",
    "activation-1.1.1.jar",
    "xercesImpl-2.9.1.jar",
    "httpclient-4.5.6.jar",
    "httpcore-4.4.10.jar",
    "commons-cli-1.2.jar",
    "commons-codec-1.10.jar",
    "commons-collections-3.2.2.jar",
    "commons-configuration-1.6.jar",
    "commons-io-2.4.jar",
    "commons-lang-2.6.jar",
    "commons-logging-1.1.3.jar",
    "log4j-1.2.17.jar",
    "slf4j-api-1.7.16.jar",
    "slf4j-log4j12-1.7.16.jar",
)
JERSEY_PACKAGES = (
    "libjersey1-core-java",
    "libjersey1-server-java",
    "libjersey1-servlet-java",
    "libjsr311-api-java",
)
JERSEY_JARS = ("jersey1-core.jar", "jersey1-server.jar", "jersey1-servlet.jar", "jsr311-api.jar")
JVM_OPTIONS = ("-Xmx256m", *SMALL_JVM_OPTIONS)

_LOG4J = """\
log4j.rootLogger=WARN,out
log4j.logger.org.apache.hadoop.hdfs.server.namenode.NameNode=INFO
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode=INFO
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{ISO8601} %-5p %c{1}: %m%n
"""


def hadoop_jars() -> Path:
    """The directory with every jar of the cluster, made on first use (see the module).

    Raises:
        StoreServerFailed: a download or an unpacking step failed.
    """
    home = cache_root() / f"hadoop-{HADOOP_VERSION}"
    lib = home / "lib"
    wanted = (*HADOOP_JARS, *JERSEY_JARS)
    if all((lib / jar).exists() for jar in wanted):
        return lib
    with install_lock(home):
        if not all((lib / jar).exists() for jar in wanted):
            with tempfile.TemporaryDirectory(prefix="epochstate-hadoop-") as scratch:
                staging = Path(scratch, "lib")
                staging.mkdir()
                _jars_from_pyspark(Path(scratch), staging)
                _jars_from_debian(Path(scratch), staging)
                shutil.rmtree(lib, ignore_errors=True)
                home.mkdir(parents=True, exist_ok=True)
                shutil.move(str(staging), lib)
    return lib


def _jars_from_pyspark(scratch: Path, lib: Path) -> None:
    run_step(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "--dest",
            str(scratch),
            PYSPARK_SDIST,
        ],
        f"downloading Hadoop {HADOOP_VERSION}'s jars ({PYSPARK_SDIST} from PyPI)",
    )
    archive = next(scratch.glob("pyspark-*.tar.gz"), None)
    if archive is None:
        raise StoreServerFailed(f"pip download {PYSPARK_SDIST} left no source archive in {scratch}")
    found = set()
    with tarfile.open(archive) as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if "/deps/jars/" in member.name and name in HADOOP_JARS and member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                (lib / name).write_bytes(source.read())
                found.add(name)
    missing = set(HADOOP_JARS) - found
    if missing:
        raise StoreServerFailed(f"{archive.name} lacks {sorted(missing)}")
    archive.unlink()


def _jars_from_debian(scratch: Path, lib: Path) -> None:
    apt, dpkg = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if apt is None or dpkg is None:
        raise StoreServerFailed(
            f"Jersey 1 for WebHDFS comes from Debian packages: no apt-get here ({JERSEY_PACKAGES})"
        )
    debs = scratch / "debs"
    debs.mkdir()
    what = f"downloading Jersey 1 ({', '.join(JERSEY_PACKAGES)}) from Debian"
    try:
        run_step([apt, "download", *JERSEY_PACKAGES], what, cwd=debs)
    except StoreServerFailed:
        # A fresh machine has no package lists yet.
        run_step([apt, "update", "-qq"], "apt-get update")
        run_step([apt, "download", *JERSEY_PACKAGES], what, cwd=debs)
    unpacked = scratch / "root"
    for deb in debs.glob("*.deb"):
        run_step([dpkg, "-x", str(deb), str(unpacked)], f"unpacking {deb.name}")
    for jar in JERSEY_JARS:
        source = unpacked / "usr" / "share" / "java" / jar
        if not source.exists():
            raise StoreServerFailed(f"Debian's Jersey packages have no {source.name}")
        shutil.copyfile(source.resolve(), lib / jar)


def _site(properties: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{name}</name><value>{value}</value></property>\n"
        for name, value in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


class HDFSCluster(CheckpointStore):
    """One NameNode and one DataNode, everything under ``workdir``, ports chosen free.

    :attr:`env` gives a client the standard Hadoop configuration: ``HADOOP_CONF_DIR``
    (whose ``hdfs-site.xml`` names the NameNode's HTTP address) and
    ``HADOOP_USER_NAME``, a user that is not the superuser that writes.
    """

    # Hadoop 2.7's client closing a file asks the NameNode to complete it before the
    # DataNode has reported the block, and then sleeps a fixed 400 ms: one put at a
    # time, a mirror falls seconds behind Spark.
    concurrent_puts = 8

    def __init__(self, workdir: Path, user: str = "epochstate-reader", env: dict[str, str] | None = None):
        self.workdir = workdir
        self.rpc_port = free_port()
        self.http_port = free_port()
        self.superuser = getpass.getuser()
        client_conf = workdir / "client-conf"
        self.env = {"HADOOP_CONF_DIR": str(client_conf), "HADOOP_USER_NAME": user, **(env or {})}
        self.processes: list[ServerProcess] = []
        self._writers = threading.local()  # a WebHDFS client per thread (see writer)

    def _configure(self) -> Path:
        conf = self.workdir / "conf"
        for directory in (
            conf,
            self.workdir / "web" / "webapps" / "hdfs",
            self.workdir / "web" / "webapps" / "datanode",
        ):
            directory.mkdir(parents=True, exist_ok=True)
        site = {
            "fs.defaultFS": f"hdfs://{HOST}:{self.rpc_port}",
            "hadoop.tmp.dir": str(self.workdir / "tmp"),
            "dfs.namenode.name.dir": str(self.workdir / "name"),
            "dfs.datanode.data.dir": str(self.workdir / "data"),
            "dfs.namenode.rpc-address": f"{HOST}:{self.rpc_port}",
            "dfs.namenode.http-address": f"{HOST}:{self.http_port}",
            "dfs.datanode.address": f"{HOST}:0",
            "dfs.datanode.http.address": f"{HOST}:0",
            "dfs.datanode.ipc.address": f"{HOST}:0",
            "dfs.datanode.hostname": HOST,
            "dfs.replication": "1",
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.safemode.min.datanodes": "1",
            "dfs.webhdfs.enabled": "true",
        }
        (conf / "core-site.xml").write_text(_site(site))
        (conf / "hdfs-site.xml").write_text(_site(site))
        (conf / "log4j.properties").write_text(_LOG4J)
        client = Path(self.env["HADOOP_CONF_DIR"])
        client.mkdir(parents=True, exist_ok=True)
        (client / "hdfs-site.xml").write_text(
            _site({"dfs.namenode.http-address": f"{HOST}:{self.http_port}"})
        )
        return conf

    def start(self, timeout: float = 90.0) -> HDFSCluster:
        lib = hadoop_jars()
        java = find_java()
        conf = self._configure()
        classpath = f"{conf}:{self.workdir / 'web'}:{lib}/*"

        def jvm(main: str, *args: str) -> list[str]:
            return [java, *JVM_OPTIONS, "-cp", classpath, main, *args]

        # The servers run as the superuser, whatever a client's environment says.
        env = {"HADOOP_USER_NAME": self.superuser, "HADOOP_CONF_DIR": str(conf)}
        namenode = "org.apache.hadoop.hdfs.server.namenode.NameNode"
        run_step(
            jvm(namenode, "-format", "-nonInteractive", "-force"),
            "formatting the NameNode",
            timeout=120,
            env=env,
        )
        log = self.workdir / "hdfs.log"
        self.processes.append(ServerProcess("NameNode", jvm(namenode), log, env))
        self.processes.append(
            ServerProcess("DataNode", jvm("org.apache.hadoop.hdfs.server.datanode.DataNode"), log, env)
        )
        # Ready once a block can be placed: out of safe mode, with a live DataNode
        # that has reported its disk. (A write tried earlier fails, and the file's
        # lease then blocks the next try on that name for a minute.)
        try:
            self.processes[0].wait_until(self._writable, timeout)
        except BaseException:
            self.stop()  # the DataNode too, not only the process waited on
            raise
        return self

    def _writable(self) -> bool:
        query = "qry=Hadoop:service=NameNode,name=FSNamesystemState"
        with urllib.request.urlopen(f"http://{HOST}:{self.http_port}/jmx?{query}", timeout=2) as response:
            beans = json.load(response).get("beans") or [{}]
        state = beans[0]
        if any(p.process.poll() is not None for p in self.processes):
            raise StoreServerFailed(f"HDFS exited:\n{self.processes[0].tail()}")
        return bool(
            state.get("FSState") == "Operational"
            and state.get("NumLiveDataNodes", 0) >= 1
            and state.get("CapacityRemaining", 0) > 0
        )

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def writer(self) -> Any:
        """WebHDFS as the superuser (the one who started the NameNode), one client per
        thread: its HTTP session is not shared between a mirror's concurrent puts."""
        fs = getattr(self._writers, "fs", None)
        if fs is None:
            import fsspec

            fs = fsspec.filesystem(
                "webhdfs", host=HOST, port=self.http_port, user=self.superuser, skip_instance_cache=True
            )
            self._writers.fs = fs
        return fs

    def new_bucket(self) -> str:
        name = bucket_name()
        self.writer().mkdir(f"/{name}")
        return name

    def uri(self, bucket: str, prefix: str) -> str:
        return f"hdfs://{HOST}:{self.rpc_port}/{bucket}/{prefix.strip('/')}"

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.writer().pipe_file(f"/{bucket}/{key}", body)

    def delete(self, bucket: str, key: str) -> None:
        self.writer().rm_file(f"/{bucket}/{key}")
