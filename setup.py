"""Build hook for the one optional C extension; every other setting lives in setup.cfg.

``pybroker.records._walk`` is the record walk of records/validator.py in C (Kafka's LogValidator
checks every produced record; in Python that walk costs ~1 us per record).  ``optional=True``: on a
machine without a C compiler the install still succeeds and the validator uses its Python walk,
which gives the same answers.  `pip install -e .` builds it in place.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pybroker.records._walk",
            ["pybroker/records/_walk.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
