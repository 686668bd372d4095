"""The RocksDB state store provider: changelogs, snapshot zips, their table files and MANIFESTs."""
