"""Root conftest: the test suites run the codec strictly (``codec.strict_field_names``), so a handler
that names a field its message does not declare fails the test instead of encoding a default.  Set in
the environment, it reaches the broker processes the tests start too."""

import os

os.environ.setdefault("PYBROKER_STRICT_CODEC", "1")
