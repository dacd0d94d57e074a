"""Lab hosts only: keep the bytecode of the Ansible module code that every task ships as source.

Each task sends its module with Ansible's module_utils as Python source in a new zip (AnsiballZ), so the host's Python
compiles about 20,000 lines again per task: measured on a lab host, a ping took 0.40 CPU-seconds, half of it
compiling. `lab up` installs this file on each host with a .pth line that imports it at every interpreter start;
the code object a source compiles to is then read from a root-only cache keyed by the source's sha256 (0.20 s).
The same source gives the same code, so what a module does cannot differ; anything unexpected compiles as before.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import stat
import sys
import zipimport
from types import CodeType
from typing import Callable, Optional

CACHE_DIR = f"/var/cache/vllm-fleet-lab/ansiballz-pyc/{sys.implementation.cache_tag}"
MODULE_NAME = "vfl_lab_ansiballz_pyc"
PTH_LINE = f"import {MODULE_NAME}\n"
_SHIPPED = ("/ansible/", "/ansible_collections/")


def relocated(code: CodeType, filename: str) -> CodeType:
    """Return code with its own and every nested code object's file name set to filename (tracebacks stay true)."""
    consts = tuple(relocated(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def private_dir(path: str, owner: int) -> bool:
    """Tell whether path is a directory that owner owns and nobody else may use: the only kind trusted."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == owner and not info.st_mode & 0o077


def cached_compiler(compile_source: Callable[[str, bytes], CodeType], cache_dir: str = CACHE_DIR,
                    owner: int = 0) -> Callable[[str, bytes], CodeType]:
    """Return zipimport's compile step wrapped in the cache, for the Ansible module code owner's processes run."""

    def compile_cached(pathname: str, source: bytes) -> CodeType:
        """Compile a zipped source as zipimport does, reading and filling the cache when it is owner's own."""
        if os.geteuid() != owner or not any(part in pathname for part in _SHIPPED):
            return compile_source(pathname, source)
        try:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        except OSError:
            return compile_source(pathname, source)
        if not private_dir(cache_dir, owner):
            return compile_source(pathname, source)
        entry = os.path.join(cache_dir, hashlib.sha256(source).hexdigest())
        code = _read(entry)
        if code is not None:
            return relocated(code, pathname)
        code = compile_source(pathname, source)
        _write(entry, code)
        return code

    return compile_cached


def _read(entry: str) -> Optional[CodeType]:
    """Return the cached code object at entry, or None when there is none or it is damaged."""
    try:
        with open(entry, "rb") as cached:
            code = marshal.load(cached)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


def _write(entry: str, code: CodeType) -> None:
    """Store code at entry atomically; a failure only means the next task compiles again."""
    scratch = f"{entry}.{os.getpid()}"
    try:
        with open(scratch, "wb") as out:
            marshal.dump(code, out)
        os.replace(scratch, entry)
    except OSError:
        try:
            os.unlink(scratch)
        except OSError:
            pass


def install() -> None:
    """Wrap zipimport's compile step, where this Python has one (the lab's 3.11 and 3.12 do)."""
    compile_source = getattr(zipimport, "_compile_source", None)
    if callable(compile_source) and not getattr(compile_source, "vfl_lab", False):
        wrapped = cached_compiler(compile_source)
        wrapped.vfl_lab = True  # type: ignore[attr-defined]
        zipimport._compile_source = wrapped  # type: ignore[attr-defined]


if __name__ == MODULE_NAME:
    install()
