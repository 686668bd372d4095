"""Real servers started as subprocesses, for development and tests (not production)."""
