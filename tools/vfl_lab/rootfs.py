"""Root filesystems built with debootstrap, cached on disk by recipe digest."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from .plan import ROOT_PACKAGES, UBUNTU_KEYRING_DEB, UBUNTU_KEYRING_SHA256, Distro, LabError, recipe_digest

SCRIPTS = Path("/usr/share/debootstrap/scripts")
MARKER = ".vfl-recipe.json"


def root_path(roots_dir: Path, distro: Distro) -> Path:
    """Return where the cached root of a distro's current recipe lives."""
    return roots_dir / f"{distro.name}-{recipe_digest(distro)}"


def _keyring(roots_dir: Path, distro: Distro, mirror: str) -> Path:
    """Fetch and unpack the pinned Ubuntu keyring package; refuse it unless its sha256 matches the pin."""
    unpacked = roots_dir / "ubuntu-keyring"
    if not (unpacked / str(distro.keyring)).exists():
        url = f"{mirror}/{UBUNTU_KEYRING_DEB}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except OSError as error:
            raise LabError(f"could not fetch {url} for {distro.name}: {error}") from None
        if hashlib.sha256(data).hexdigest() != UBUNTU_KEYRING_SHA256:
            raise LabError(f"{url} does not match its pinned sha256 {UBUNTU_KEYRING_SHA256}: the mirror is not trusted")
        deb = roots_dir / "ubuntu-keyring.deb"
        deb.write_bytes(data)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        deb.unlink()
    return unpacked / str(distro.keyring)


def _debootstrap_argv(distro: Distro, target: Path, mirror: str) -> list[str]:
    """Return the debootstrap command line for a distro's root."""
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}"]
    if distro.keyring:
        argv.append(f"--keyring={_keyring(target.parent, distro, mirror)}")
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

