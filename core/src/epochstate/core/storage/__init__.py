"""The one filesystem layer: checkpoint locations on a local disk or an object store.

``location`` names a file or directory (:class:`Location`, path-like); ``local`` and
``remote`` are the two kinds of storage behind it (the local filesystem; anything
fsspec reaches: S3, GCS, Azure, WebHDFS); ``retry`` is how transient faults are
retried; ``cache`` keeps whole remote files (snapshot zips, table files) on local
disk within a size bound. Nothing above this package knows which cloud a
checkpoint lives in.
"""

from epochstate.core.storage.location import FileStat, Location, open_location
from epochstate.core.storage.stats import StorageStats

__all__ = ["FileStat", "Location", "StorageStats", "open_location"]
