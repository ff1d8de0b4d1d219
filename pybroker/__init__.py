"""pybroker: a Kafka-wire-compatible broker written in Python."""

__version__ = "0.1.0"  # the one place the version is written (setup.cfg reads it)
