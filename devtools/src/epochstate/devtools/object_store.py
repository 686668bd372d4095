"""The S3 server and the checkpoint mirror under the names benchmarks import
(see :mod:`epochstate.devtools.stores`)."""

from epochstate.devtools.stores.mirror import CheckpointMirror
from epochstate.devtools.stores.s3 import REGION, S3Server

__all__ = ["REGION", "CheckpointMirror", "S3Server"]
