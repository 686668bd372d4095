"""The ingest loop: committed epochs flow from a checkpoint (layer 1) into the store
(layer 2) and are published in ZooKeeper (layer 3)."""
