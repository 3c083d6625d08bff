"""The console's files: every file in ``querator/console/static/`` is served, and ships in the wheel
(pyproject's package-data globs name it); a file of an unknown kind is a packaging mistake."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

import querator
from querator.console import ConsoleFiles
from querator.console._files import _walk

PACKAGE = Path(querator.__file__).parent
STATIC = PACKAGE / "console" / "static"
ROOT = PACKAGE.parent


def _on_disk() -> set[str]:
    return {str(p.relative_to(STATIC)) for p in STATIC.rglob("*") if p.is_file()}


def test_every_file_is_served() -> None:
    assert set(ConsoleFiles.load().names()) == _on_disk()


def test_every_file_ships_in_the_package() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = settings["package-data"]["querator"]
    for name in _on_disk():
        path = f"console/static/{name}"
        assert any(fnmatch.fnmatch(path, g) and path.count("/") == g.count("/") for g in globs), path


def test_a_file_of_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / "notes.py").write_text("import os")
    with pytest.raises(RuntimeError, match=r"unknown kind: notes\.py"):
        _walk(tmp_path, "", {})
