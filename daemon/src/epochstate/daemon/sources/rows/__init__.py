"""Spark's row formats in state files: UnsafeRow, Avro, and the LZ4 block stream around them."""
