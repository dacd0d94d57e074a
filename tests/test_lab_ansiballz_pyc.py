"""The lab hosts' bytecode cache for Ansible's zipped module code (tools/vfl_lab/ansiballz_pyc.py)."""

from __future__ import annotations

import importlib
import marshal
import os
import sys
import zipfile
import zipimport
from pathlib import Path
from types import CodeType
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from vfl_lab import ansiballz_pyc, machine  # noqa: E402

SOURCE = b"def answer():\n    raise ValueError('from the zip')\n\nVALUE = 42\n"


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """Route zipimport through the cache in tmp_path/cache; yield the paths that zipimport really compiled."""
    compiled: list[str] = []
    original = zipimport._compile_source  # type: ignore[attr-defined]

    def counting(pathname: str, source: bytes) -> CodeType:
        """Compile as zipimport does and note that it did."""
        compiled.append(pathname)
        return original(pathname, source)

    monkeypatch.setattr(zipimport, "_compile_source",
                        ansiballz_pyc.cached_compiler(counting, str(tmp_path / "cache"), os.geteuid()))
    yield compiled
    for name in [name for name in sys.modules if name.startswith("ansible_lab_probe")]:
        del sys.modules[name]


def zipped(tmp_path: Path, name: str, package: str = "ansible_lab_probe", source: bytes = SOURCE) -> str:
    """Write a payload zip holding ansible/<package>/mod.py, as AnsiballZ ships module code; return its path."""
    path = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(path, "w") as payload:
        payload.writestr(f"ansible/{package}/__init__.py", "")
        payload.writestr(f"ansible/{package}/mod.py", source)
    return str(path)


def load(zip_path: str, package: str = "ansible_lab_probe") -> object:
    """Import ansible/<package>/mod.py from zip_path alone, as a new task's interpreter would."""
    for name in (package, f"{package}.mod"):
        sys.modules.pop(name, None)
    sys.path.insert(0, f"{zip_path}/ansible")
    try:
        return importlib.import_module(f"{package}.mod")
    finally:
        sys.path.remove(f"{zip_path}/ansible")
        importlib.invalidate_caches()


def test_second_payload_reads_the_cache_and_tracebacks_name_its_own_zip(tmp_path: Path,
                                                                           compiles: list[str]) -> None:
    """The first zip compiles and fills the cache; a new zip with the same source compiles nothing, runs the same
    code, and its functions name the new zip in tracebacks."""
    first = load(zipped(tmp_path, "task1"))
    second_zip = zipped(tmp_path, "task2")
    second = load(second_zip)
    assert sum(p.endswith("mod.py") for p in compiles) == 1, compiles
    assert first.VALUE == second.VALUE == 42  # type: ignore[attr-defined]
    assert second.answer.__code__.co_filename.startswith(second_zip)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="from the zip"):
        second.answer()  # type: ignore[attr-defined]


def test_a_damaged_entry_compiles_again(tmp_path: Path, compiles: list[str]) -> None:
    """A truncated or foreign cache entry is never run: the source is compiled again and the entry replaced."""
    load(zipped(tmp_path, "task1"))
    for entry in (tmp_path / "cache").iterdir():
        entry.write_bytes(entry.read_bytes()[:7])
    module = load(zipped(tmp_path, "task2"))
    assert module.VALUE == 42  # type: ignore[attr-defined]
    assert sum(p.endswith("mod.py") for p in compiles) == 2, compiles


def test_a_cache_others_may_write_is_never_read(tmp_path: Path, compiles: list[str]) -> None:
    """Code in a directory another user could write is not trusted: a planted entry does not run."""
    cache = tmp_path / "cache"
    load(zipped(tmp_path, "task1"))
    planted = compile("VALUE = 'planted'\n", "planted", "exec")
    for entry in cache.iterdir():
        entry.write_bytes(marshal.dumps(planted))
    os.chmod(cache, 0o777)
    assert load(zipped(tmp_path, "task2")).VALUE == 42  # type: ignore[attr-defined]


def test_code_that_is_not_ansibles_is_left_alone(tmp_path: Path, compiles: list[str]) -> None:
    """Only the module code Ansible ships is cached: another zip's source compiles as before, nothing is stored."""
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as payload:
        payload.writestr("ansible_lab_probe_other.py", "VALUE = 7\n")
    sys.path.insert(0, str(path))
    try:
        assert importlib.import_module("ansible_lab_probe_other").VALUE == 7
    finally:
        sys.path.remove(str(path))
    assert set(compiles) == {f"{path}/ansible_lab_probe_other.py"} and not (tmp_path / "cache").exists()


def test_lab_up_installs_the_cache_where_the_system_python_reads_it(tmp_path: Path) -> None:
    """personalise puts the module and its .pth line into the host's dist-packages (a root without Python: none)."""
    site = tmp_path / "usr/lib/python3/dist-packages"
    site.mkdir(parents=True)
    machine.install_ansiballz_cache(tmp_path)
    assert (site / "vfl_lab_ansiballz_pyc.pth").read_text() == "import vfl_lab_ansiballz_pyc\n"
    assert (site / "vfl_lab_ansiballz_pyc.py").read_text() == Path(ansiballz_pyc.__file__).read_text()
    bare = tmp_path / "bare"
    bare.mkdir()
    machine.install_ansiballz_cache(bare)
    assert list(bare.iterdir()) == []


def test_installing_twice_wraps_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second import of the hook (a .pth read twice) does not wrap the compile step again."""
    original: Callable[[str, bytes], CodeType] = zipimport._compile_source  # type: ignore[attr-defined]
    monkeypatch.setattr(zipimport, "_compile_source", original)
    ansiballz_pyc.install()
    once = zipimport._compile_source  # type: ignore[attr-defined]
    ansiballz_pyc.install()
    assert zipimport._compile_source is once is not original  # type: ignore[attr-defined]
