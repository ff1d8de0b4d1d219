"""pybroker: a Kafka-wire-compatible broker written in Python."""

from pybroker import _compiled

__version__ = "0.1.0"  # the one place the version is written (setup.cfg reads it)

# The produce path's Cython-compiled modules, imported only when built from the current source.
_compiled.install()
