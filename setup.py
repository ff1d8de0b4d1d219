"""Build hook for the two optional C extensions; every other setting lives in setup.cfg.

``pybroker.records._walk`` is the record walk of records/validator.py in C (Kafka's LogValidator
checks every produced record; in Python that walk costs ~1 us per record).  ``optional=True``: on a
machine without a C compiler the install still succeeds and the validator uses its Python walk,
which gives the same answers.  ``pybroker.storage._logwriter`` is a log directory's writer thread
that never takes the GIL (storage/writer.py falls back to a Python thread).  `pip install -e .`
builds both in place.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pybroker.records._walk",
            ["pybroker/records/_walk.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        # A log directory's writer thread without the GIL (storage/writer.py; Python thread otherwise).
        Extension(
            "pybroker.storage._logwriter",
            ["pybroker/storage/_logwriter.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
