"""Root filesystems built with debootstrap, cached on disk by recipe digest."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from .plan import ROOT_PACKAGES, Distro, LabError, recipe_digest

SCRIPTS = Path("/usr/share/debootstrap/scripts")
MARKER = ".vfl-recipe.json"


def root_path(roots_dir: Path, distro: Distro) -> Path:
    """Return where the cached root of a distro's current recipe lives."""
    return roots_dir / f"{distro.name}-{recipe_digest(distro)}"


def _debootstrap_argv(distro: Distro, target: Path, mirror: str) -> list[str]:
    """Return the debootstrap command line for a distro's root."""
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}"]
    if distro.keyring:
        if not Path(distro.keyring).exists():
            raise LabError(f"{distro.name} needs the keyring {distro.keyring}: apt-get install ubuntu-keyring")
        argv.append(f"--keyring={distro.keyring}")
    argv += [distro.suite, str(target), mirror]
    if distro.script and not (SCRIPTS / distro.suite).exists():
        argv.append(str(SCRIPTS / distro.script))
    return argv


def _finish(root: Path) -> None:
    """Make a fresh root fit to be many hosts: no machine id, no shared SSH host keys, no apt cache."""
    (root / "etc/machine-id").write_text("")
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True)


def ensure_root(roots_dir: Path, distro: Distro, mirror: str) -> tuple[Path, bool]:
    """Return the cached root of a distro, building it first when missing; the flag says whether it was built."""
    root = root_path(roots_dir, distro)
    if (root / MARKER).exists():
        return root, False
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log = roots_dir / f"{root.name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(_debootstrap_argv(distro, partial, mirror), stdout=out, stderr=out, check=False)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = "".join(log.read_text().splitlines(keepends=True)[-5:])
        raise LabError(f"debootstrap of {distro.name} from {mirror} failed (log {log}):\n{tail}")
    _finish(partial)
    (partial / MARKER).write_text(json.dumps({"distro": distro.name, "mirror": mirror,
                                              "seconds": round(time.monotonic() - started, 1)}))
    partial.rename(root)
    return root, True

