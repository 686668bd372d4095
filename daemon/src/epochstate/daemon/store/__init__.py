"""Layer 2: the local multi-version store on RocksDB (rocksdict)."""
