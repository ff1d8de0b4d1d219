"""The produce path's modules compiled by Cython, and the import hook that loads them only when current.

setup.py compiles each module of ``COMPILED_MODULES`` from its ``.py`` as it is (plain Python semantics:
annotations are not turned into C types), which takes ~20 % off the CPU time of a one-partition Produce
request (``python -m bench.request_path``).  The ``.py`` stays the source of truth: beside each built
extension setup.py writes ``<extension>.source-sha256``, the hash of the ``.py`` it was compiled from.

``CompiledModuleFinder`` (installed by ``pybroker/__init__.py``) imports the extension only when that hash
matches the ``.py`` on disk.  Without it, an editable install whose ``.py`` was edited after the last
build would silently run the old compiled code, since Python prefers an extension module over a
same-named ``.py``.  A stale or unhashed extension is skipped with one warning and the source imported.
``PYBROKER_PURE_PYTHON=1`` imports the source for every module (profilers such as py-spy see only
Python frames).  Without a build (no C compiler or no Cython at install time) the ``.py`` is imported.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

COMPILED_MODULES: tuple[str, ...] = (
    "pybroker.server",
    "pybroker.protocol.framing",
    "pybroker.protocol.codec",
    "pybroker.apis.produce",
    "pybroker.replication.replica_manager",
    "pybroker.replication.partition",
    "pybroker.replication.append",
    "pybroker.records.batch",
    "pybroker.records.validator",
    "pybroker.storage.log",
    "pybroker.storage.segment",
    "pybroker.storage.index",
    "pybroker.storage.producer_state",
    "pybroker.storage.leader_epoch",
    "pybroker.storage.writer",
)

SIDECAR_SUFFIX = ".source-sha256"
PURE_PYTHON_ENV = "PYBROKER_PURE_PYTHON"


def source_sha256(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def pure_python_requested() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


class CompiledModuleFinder:
    """A meta path finder for ``COMPILED_MODULES`` only: the extension if its recorded source hash is
    the ``.py``'s, else the ``.py``.  Every other module is left to the normal finders."""

    def __init__(self, names: Sequence[str] = COMPILED_MODULES) -> None:
        self._names = frozenset(names)
        self.loaded_compiled: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self._names or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if os.path.exists(source):
                break
        else:
            return None  # not here as source: let the normal finders look
        if not pure_python_requested():
            extension = self._current_extension(fullname, directory, leaf, source)
            if extension is not None:
                self.loaded_compiled.add(fullname)
                loader = importlib.machinery.ExtensionFileLoader(fullname, extension)
                return importlib.util.spec_from_file_location(fullname, extension, loader=loader)
        loader_ = importlib.machinery.SourceFileLoader(fullname, source)
        return importlib.util.spec_from_file_location(fullname, source, loader=loader_)

    @staticmethod
    def _current_extension(fullname: str, directory: str, leaf: str, source: str) -> str | None:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            extension = os.path.join(directory, leaf + suffix)
            if os.path.exists(extension):
                break
        else:
            return None
        try:
            recorded = Path(extension + SIDECAR_SUFFIX).read_text().strip()
        except OSError:
            recorded = ""
        if recorded and recorded == source_sha256(source):
            return extension
        warnings.warn(
            f"{fullname}: the compiled extension was not built from the current {leaf}.py; importing the "
            "source (rebuild with `pip install -e .` or `python3 setup.py build_ext --inplace`)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def install() -> CompiledModuleFinder:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    for finder in sys.meta_path:
        if isinstance(finder, CompiledModuleFinder):
            return finder
    finder = CompiledModuleFinder()
    sys.meta_path.insert(0, finder)
    return finder
