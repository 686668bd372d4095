"""A streaming query's checkpoint logs: metadata, the offset log (planned epochs), the commit log."""
