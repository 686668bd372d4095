"""The tests' Spark JVM uses the local file system of ``epochstate.devtools.local_filesystem``,
and it answers as Hadoop's own ``RawLocalFileSystem`` does, in the same JVM, for every kind
of path: files, directories, symbolic links to either, dangling links and missing paths."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from epochstate.devtools import local_filesystem

pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class FileSystems:
    """The session JVM, the ``file:`` scheme's raw file system in it, and Hadoop's own."""

    jvm: Any
    ours: Any
    hadoops: Any

    def path(self, path: Path) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(f"file://{path}")


def _status(fs: Any, path: Any) -> tuple[Any, ...] | str:
    """What ``getFileLinkStatus`` says of ``path``, or the Java exception's class."""
    try:
        status = fs.getFileLinkStatus(path)
    except Py4JJavaError as error:
        return str(error.java_exception.getClass().getName())
    return (
        status.getPath().toString(),
        status.isDirectory(),
        status.isSymlink(),
        status.getSymlink().toString() if status.isSymlink() else None,
        None if status.isDirectory() else status.getLen(),
        status.getPermission().toShort(),
        status.getOwner(),
        status.getModificationTime(),
    )


@pytest.fixture
def file_systems(spark: Any) -> FileSystems:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    ours = jvm.org.apache.hadoop.fs.Path("file:///").getFileSystem(conf).getRaw()
    hadoops = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    hadoops.initialize(jvm.java.net.URI("file:///"), conf)
    return FileSystems(jvm, ours, hadoops)


def test_the_session_writes_files_through_it(spark: Any) -> None:
    jar = local_filesystem.jar_path()
    assert jar is not None and jar.is_file(), (
        "make pytest builds the jar (python -m epochstate.devtools.class_archive)"
    )
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    file_system = jvm.org.apache.hadoop.fs.Path("file:///").getFileSystem(conf)
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    package = local_filesystem.PACKAGE
    assert file_system.getClass().getName() == f"{package}.NioLocalFileSystem"
    assert file_system.getRaw().getClass().getName() == f"{package}.NioRawLocalFileSystem"
    assert context.getDefaultFileSystem().getClass().getName() == f"{package}.NioLocalFs"


def test_link_status_equals_hadoops_for_every_kind_of_path(file_systems: FileSystems, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"twelve bytes")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link-to-file").symlink_to(tmp_path / "file")
    (tmp_path / "link-to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    answers = {
        name: [
            _status(fs, file_systems.path(tmp_path / name))
            for fs in (file_systems.ours, file_systems.hadoops)
        ]
        for name in ("file", "dir", "link-to-file", "link-to-dir", "dangling", "missing")
    }
    for name, (mine, theirs) in answers.items():
        assert mine == theirs, name
    assert answers["missing"][0] == "java.io.FileNotFoundException"


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o755, 0o000, 0o777, 0o1777])
def test_permissions_set_equal_hadoops(file_systems: FileSystems, tmp_path: Path, mode: int) -> None:
    permission = file_systems.jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    modes = []
    for name, fs in (("ours", file_systems.ours), ("hadoops", file_systems.hadoops)):
        (tmp_path / name).mkdir()
        fs.setPermission(file_systems.path(tmp_path / name), permission)
        modes.append(stat.S_IMODE(os.stat(tmp_path / name).st_mode))
    assert modes == [mode, mode]
