"""pybroker as the Kafka of a test suite: an in-process broker (`EmbeddedBroker`) and the pytest plugin
(`pybroker.testing.pytest_plugin`, registered through the `pytest11` entry point)."""

from pybroker.testing.embedded import TEST_BROKER_DEFAULTS, EmbeddedBroker, free_port

__all__ = ["TEST_BROKER_DEFAULTS", "EmbeddedBroker", "free_port"]
