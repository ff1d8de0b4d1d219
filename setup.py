"""Build hook for pybroker's optional compiled modules; every other setting lives in setup.cfg.

``pybroker.records._walk`` is the record walk of records/validator.py in C (Kafka's LogValidator
checks every produced record; in Python that walk costs ~1 us per record).  ``pybroker.storage._logwriter``
is a log directory's writer thread that never takes the GIL (storage/writer.py falls back to a Python
thread).  The modules listed in ``pybroker/_compiled.py`` (the produce path) are compiled by Cython from
their ``.py`` as they are; beside each goes ``<extension>.source-sha256``, the hash of the source it was
built from, so that an extension older than its ``.py`` is never imported (pybroker/_compiled.py).

Every extension is ``optional=True``: on a machine without a C compiler (or without Cython) the install
still succeeds and pybroker runs its Python source, which gives the same answers.  `pip install -e .`
builds them in place.
"""

from __future__ import annotations

import ast
import hashlib
import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SIDECAR_SUFFIX = ".source-sha256"  # pybroker/_compiled.py's; read here without importing pybroker


def compiled_module_names() -> list[str]:
    """COMPILED_MODULES from pybroker/_compiled.py, read without importing the package."""
    tree = ast.parse(Path("pybroker/_compiled.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "COMPILED_MODULES":
            return list(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise RuntimeError("COMPILED_MODULES not found in pybroker/_compiled.py")


def cython_extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("setup.py: Cython is not installed; the produce path stays pure Python")
        return []
    extensions = [
        Extension(name, [name.replace(".", "/") + ".py"], optional=True, extra_compile_args=["-O2"])
        for name in compiled_module_names()
    ]
    return cythonize(
        extensions,
        build_dir="build/cython",
        quiet=True,
        compiler_directives={
            "language_level": 3,
            # Python semantics: an annotation is documentation, not a C type check.
            "annotation_typing": False,
            # Functions stay introspectable (inspect.signature, functools.wraps) like Python's.
            "binding": True,
        },
    )


class BuildExtWithSourceHash(build_ext):
    """build_ext that writes, beside each extension compiled from a ``.py``, that source's sha256."""

    def build_extension(self, ext: Extension) -> None:
        super().build_extension(ext)
        source = _python_source(ext)
        output = self.get_ext_fullpath(ext.name)
        if source is not None and os.path.exists(output):
            digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
            Path(output + SIDECAR_SUFFIX).write_text(digest + "\n")

    def copy_extensions_to_source(self) -> None:
        super().copy_extensions_to_source()
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(build_py, ext)
            sidecar = regular_file + SIDECAR_SUFFIX
            if os.path.exists(regular_file) and os.path.exists(sidecar):
                self.copy_file(sidecar, inplace_file + SIDECAR_SUFFIX, level=self.verbose)


def _python_source(ext: Extension) -> str | None:
    """The ``.py`` an extension was cythonized from (cythonize replaces its sources by the ``.c``)."""
    if ext.name not in compiled_module_names():
        return None
    return ext.name.replace(".", "/") + ".py"


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
        *cython_extensions(),
    ],
    cmdclass={"build_ext": BuildExtWithSourceHash},
)
