"""What a host runs (scene files, active release) and how to put a recorded state back: pure logic for the
vllm.fleet.deployment module, which does the file work."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

SCENE_SUFFIXES = (".yaml", ".env")


@dataclass(frozen=True)
class Layout:
    """Where a host keeps its scene files and its release pointer."""

    config_dir: Path
    unit_dir: Path
    unit_prefix: str
    release_link: Path

    def scene_files(self) -> dict[str, str]:
        """Return every scene file on the host (config, secret environment, unit) as path -> scene name."""
        found: dict[str, str] = {}
        if self.config_dir.is_dir():
            for path in sorted(self.config_dir.iterdir()):
                if path.is_file() and path.suffix in SCENE_SUFFIXES:
                    found[str(path)] = path.stem
        if self.unit_dir.is_dir():
            for path in sorted(self.unit_dir.glob(f"{self.unit_prefix}*.service")):
                found[str(path)] = self.scene_of_unit(path.name)
        return found

    def scene_of_unit(self, unit: str) -> str:
        """Return the scene name of one of its unit file names."""
        return re.sub(r"\.service$", "", unit)[len(self.unit_prefix):]

    def unit_of(self, scene: str) -> str:
        """Return the systemd unit name of a scene."""
        return f"{self.unit_prefix}{scene}.service"


@dataclass(frozen=True)
class RestorePlan:
    """The file work and the service work that put a recorded state back."""

    write: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)
    remove_scenes: list[str] = field(default_factory=list)
    recorded_scenes: list[str] = field(default_factory=list)
    relink: bool = False


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file's content."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digests(files: dict[str, str]) -> dict[str, str]:
    """Return path -> sha256 of the files given as path -> scene."""
    return {path: sha256_file(Path(path)) for path in files}


def plan_restore(recorded: dict[str, str], current: dict[str, str], scene_of: dict[str, str],
                 recorded_release: str | None, current_release: str | None) -> RestorePlan:
    """Plan the restore: files back where they differ, new scenes removed, changed scenes restarted."""
    write = sorted(path for path, digest in recorded.items() if current.get(path) != digest)
    delete = sorted(path for path in current if path not in recorded)
    recorded_scenes = {scene_of[path] for path in recorded}
    remove_scenes = sorted({scene_of[path] for path in delete} - recorded_scenes)
    restart = sorted({scene_of[path] for path in write + delete} & recorded_scenes)
    relink = recorded_release is not None and recorded_release != current_release
    return RestorePlan(write=write, delete=delete, restart=restart, remove_scenes=remove_scenes,
                       recorded_scenes=sorted(recorded_scenes), relink=relink)


def snapshot_name(path: str) -> str:
    """Return the file name under which the snapshot keeps a scene file (its path, flattened)."""
    return path.strip("/").replace("/", "__")
