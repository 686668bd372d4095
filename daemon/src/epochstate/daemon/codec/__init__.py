"""Encodings the daemon owns: store keys (order-preserving) and ``epochstate.v1.Record`` bytes."""
