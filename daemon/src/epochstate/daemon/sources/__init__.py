"""Layer 1: readers of Spark checkpoints (logs, metadata, schemas, state files)."""
