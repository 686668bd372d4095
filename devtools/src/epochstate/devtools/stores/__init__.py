"""Real checkpoint store servers on loopback, one module per kind, for tests and
benchmarks: S3 (moto), GCS (fake-gcs-server), Azure Blob (Azurite), HDFS (a
NameNode and a DataNode). Each is a :class:`CheckpointStore`; a
:class:`CheckpointMirror` copies a local Spark checkpoint into any of them.

Servers that come from a registry but not from pip (Azurite from npm, Hadoop's
jars) are installed on first use into a cache outside the clone
(:func:`cache_root`), once per machine.
"""

from epochstate.devtools.stores.azure import AzuriteServer
from epochstate.devtools.stores.base import CheckpointStore, StoreServerFailed, cache_root
from epochstate.devtools.stores.gcs import GCSServer
from epochstate.devtools.stores.hdfs import HDFSCluster
from epochstate.devtools.stores.mirror import CheckpointMirror
from epochstate.devtools.stores.s3 import S3Server

__all__ = [
    "AzuriteServer",
    "CheckpointMirror",
    "CheckpointStore",
    "GCSServer",
    "HDFSCluster",
    "S3Server",
    "StoreServerFailed",
    "cache_root",
]
