"""The HDFS-backed state store provider: ``<version>.delta`` and ``<version>.snapshot`` files."""
