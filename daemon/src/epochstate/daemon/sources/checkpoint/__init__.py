"""The state side of a checkpoint: operators, their stores, schema files (on top of the query's logs)."""
