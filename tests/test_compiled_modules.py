"""The Cython-compiled produce path (pybroker/_compiled.py): an extension is imported only when it was
built from the ``.py`` on disk, the source otherwise, and ``PYBROKER_PURE_PYTHON=1`` forces the source.

The finder is exercised on a throwaway package built here (a real extension module compiled by Cython,
so the test needs no pybroker build), and the installed tree is checked for what it holds.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pybroker import _compiled


def _build_package(root: Path, body: str) -> Path:
    """A package ``fakepkg`` with module ``hot`` (from ``body``), compiled in place by Cython."""
    package = root / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hot.py").write_text(body)
    (root / "setup.py").write_text(
        textwrap.dedent(
            """
            from Cython.Build import cythonize
            from setuptools import setup
            setup(ext_modules=cythonize(["fakepkg/hot.py"], quiet=True,
                                        compiler_directives={"language_level": 3}))
            """
        )
    )
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    [extension] = [
        p for p in package.iterdir() if p.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    ]
    return extension


def _import_with_finder(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, _compiled.CompiledModuleFinder]:
    finder = _compiled.CompiledModuleFinder(["fakepkg.hot"])
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    for name in ("fakepkg", "fakepkg.hot"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()
    return importlib.import_module("fakepkg.hot"), finder


def test_current_extension_is_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extension = _build_package(tmp_path, "def where():\n    return 'built'\n")
    sidecar = Path(str(extension) + _compiled.SIDECAR_SUFFIX)
    sidecar.write_text(_compiled.source_sha256(tmp_path / "fakepkg" / "hot.py") + "\n")
    monkeypatch.delenv(_compiled.PURE_PYTHON_ENV, raising=False)

    module, finder = _import_with_finder(tmp_path, monkeypatch)

    assert module.__file__ == str(extension)  # type: ignore[attr-defined]
    assert finder.loaded_compiled == {"fakepkg.hot"}
    assert module.where() == "built"  # type: ignore[attr-defined]


def test_edited_source_wins_over_a_stale_extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extension = _build_package(tmp_path, "def where():\n    return 'built'\n")
    source = tmp_path / "fakepkg" / "hot.py"
    Path(str(extension) + _compiled.SIDECAR_SUFFIX).write_text(_compiled.source_sha256(source))
    source.write_text("def where():\n    return 'edited'\n")  # edited after the build
    monkeypatch.delenv(_compiled.PURE_PYTHON_ENV, raising=False)

    with pytest.warns(RuntimeWarning, match="not built from the current hot.py"):
        module, finder = _import_with_finder(tmp_path, monkeypatch)

    assert module.__file__ == str(source)  # type: ignore[attr-defined]
    assert module.where() == "edited"  # type: ignore[attr-defined]
    assert finder.loaded_compiled == set()


def test_extension_without_a_recorded_hash_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build_package(tmp_path, "def where():\n    return 'built'\n")
    monkeypatch.delenv(_compiled.PURE_PYTHON_ENV, raising=False)

    with pytest.warns(RuntimeWarning):
        module, _finder = _import_with_finder(tmp_path, monkeypatch)

    assert module.__file__.endswith("hot.py")  # type: ignore[attr-defined]


def test_pure_python_switch_imports_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extension = _build_package(tmp_path, "def where():\n    return 'built'\n")
    Path(str(extension) + _compiled.SIDECAR_SUFFIX).write_text(
        _compiled.source_sha256(tmp_path / "fakepkg" / "hot.py")
    )
    monkeypatch.setenv(_compiled.PURE_PYTHON_ENV, "1")

    module, finder = _import_with_finder(tmp_path, monkeypatch)

    assert module.__file__.endswith("hot.py")  # type: ignore[attr-defined]
    assert finder.loaded_compiled == set()


def test_installed_tree_holds_a_current_build_of_every_listed_module() -> None:
    """After `pip install -e .` (as CI and the README do) each listed module has an extension and a
    matching hash, so the broker the other tests start runs the compiled path.  On a machine without a
    C compiler this is the test that says so."""
    missing = []
    for name in _compiled.COMPILED_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        if not spec.origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            missing.append(name)
    assert missing == [], f"imported from source, not compiled: {missing}"


def test_broker_process_imports_the_compiled_modules() -> None:
    """A fresh interpreter (as `pybroker serve` starts) gets the extensions through the package's hook."""
    script = (
        "import importlib, sys, pybroker._compiled as c\n"
        "for n in c.COMPILED_MODULES: importlib.import_module(n)\n"
        "print(sum(1 for n in c.COMPILED_MODULES if not sys.modules[n].__file__.endswith('.py')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_PYTHON_ENV}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(len(_compiled.COMPILED_MODULES))
    env[_compiled.PURE_PYTHON_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
