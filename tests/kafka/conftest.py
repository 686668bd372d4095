"""Kafka tests run against the real broker of tests.fixtures.kafka (registered in tests/conftest.py)."""
