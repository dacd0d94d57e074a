#!/usr/bin/env python3
"""Build an offline wheelhouse for a pinned release, holding only what a prepared image's Python lacks.

The target's Python (a GPU image with torch, triton and the CUDA libraries, say) is described by its `pip list
--format=freeze`. The requirement is resolved for the target's Python version and manylinux platform in a throwaway
environment whose site-packages holds a fake dist-info for every provided distribution, so pip keeps them and lists only
what is missing. Those wheels are downloaded hash-checked, SHA256SUMS and requirements.lock are written, the set is split
into carry chunks under a size cap (chunk-00/reassemble.sh puts it back together), and an offline dry-run install from
the reassembled chunks proves that the set needs nothing else.

Usage: tools/offline_wheelhouse.py --requirement vllm==0.26.0 --python 3.12 --provided FREEZE.txt
       [--skip NAME ...] --out DIR [--chunk-mib 58] [--glibc 2.35] [--interpreter PATH]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.vllm.fleet.plugins.plugin_utils.wheelhouse import Wheel, canonical, lock_text, wheels_from_report

MIB = 1024 * 1024
# The oldest glibc among the distributions the kit supports (Ubuntu 22.04), so one wheelhouse fits every host.
DEFAULT_GLIBC = "2.35"
# --dry-run with --python-version/--platform but without --target needs pip 23.3.
RESOLVER_PIP = "pip>=24"
CHUNK_DIR = re.compile(r"chunk-\d\d")
FREEZE_LINE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*([^\s;#]+)\s*(?:#.*)?$")
SUMS, LOCK, MANIFEST, SCRIPT = "SHA256SUMS", "requirements.lock", "wheelhouse.json", "reassemble.sh"


@dataclass(frozen=True)
class Dist:
    """A distribution name and version."""

    name: str
    version: str


@dataclass(frozen=True)
class Piece:
    """A byte range of a wheelhouse file, stored in a chunk under `target` (the file name, or NAME.part-NN)."""

    source: str
    target: str
    offset: int
    size: int


def parse_freeze(text: str) -> dict[str, Dist]:
    """The `name==version` lines of a pip freeze, keyed by canonical name; every other line is ignored."""
    found = (FREEZE_LINE.match(line) for line in text.splitlines())
    return {canonical(m[1]): Dist(m[1], m[2]) for m in found if m}


def unpinned_lines(text: str) -> list[str]:
    """Freeze lines naming a distribution without a version (`name @ url`), which the provided set cannot use."""
    return [line.strip() for line in text.splitlines() if re.match(r"^\s*[A-Za-z0-9][^#]*\s@\s", line)]


def manylinux_platforms(glibc: str, arch: str = "x86_64") -> list[str]:
    """Every manylinux tag a host with this glibc accepts, newest first: pip matches each --platform exactly."""
    major, minor = (int(part) for part in glibc.split("."))
    if major != 2 or minor < 5:
        raise ValueError(f"glibc {glibc}: manylinux tags exist for glibc 2.5 and later")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))
    return tags + [f"{alias}_{arch}" for alias, needs in legacy if minor >= needs]


def target_options(python: str, platforms: Sequence[str]) -> list[str]:
    """The pip options that make it choose wheels for the target's Python and platform instead of this machine's."""
    options = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for platform in platforms:
        options += ["--platform", platform]
    return options


def dist_info(dist: Dist) -> tuple[str, dict[str, str]]:
    """The directory name and files of a minimal installed-distribution record pip accepts as installed."""
    directory = f"{re.sub(r'[-_.]+', '_', dist.name)}-{dist.version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {dist.name}\nVersion: {dist.version}\n"
    return directory, {"METADATA": metadata, "INSTALLER": "offline_wheelhouse\n"}


def skipped_dists(wheels: Iterable[Wheel], skip: Iterable[str]) -> dict[str, Dist]:
    """The skipped distributions the resolution pulled in, with the versions it chose, keyed by canonical name."""
    wanted = {canonical(name) for name in skip}
    return {canonical(w.name): Dist(w.name, w.version) for w in wheels if canonical(w.name) in wanted}


def replacements(wheels: Iterable[Wheel], provided: Mapping[str, Dist]) -> list[str]:
    """`name provided -> chosen` for every provided distribution the resolution would replace."""
    return [
        f"{w.name} {provided[canonical(w.name)].version} -> {w.version}" for w in wheels if canonical(w.name) in provided
    ]


def sums_text(hashes: Mapping[str, str]) -> str:
    """SHA256SUMS in the format `sha256sum --check` reads."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(hashes.items()))


def isolated_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without any pip configuration, so an offline check cannot reach an index or another folder."""
    env = {key: value for key, value in environ.items() if not key.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def split_pieces(sizes: Mapping[str, int], cap: int) -> list[Piece]:
    """Each file as one piece, or as NAME.part-NN pieces of `cap` bytes (the last shorter) when it is bigger than cap."""
    pieces = []
    for name, size in sorted(sizes.items()):
        if size <= cap:
            pieces.append(Piece(name, name, 0, size))
            continue
        offsets = range(0, size, cap)
        if len(offsets) > 100:
            raise ValueError(f"{name}: {len(offsets)} parts of {cap} bytes, at most 100")
        pieces += [Piece(name, f"{name}.part-{i:02d}", offset, min(cap, size - offset)) for i, offset in enumerate(offsets)]
    return pieces


def pack(pieces: Iterable[Piece], cap: int, reserved: int) -> list[list[Piece]]:
    """First-fit decreasing: pieces into as few chunks of at most `cap` bytes as it finds; chunk 0 keeps `reserved`."""
    if reserved > cap:
        raise ValueError(f"the reassemble script alone ({reserved} bytes) exceeds the cap")
    chunks: list[list[Piece]] = [[]]
    used = [reserved]
    for piece in sorted(pieces, key=lambda p: (-p.size, p.target)):
        index = next((i for i, total in enumerate(used) if total + piece.size <= cap), len(chunks))
        if index == len(chunks):
            chunks.append([])
            used.append(0)
        chunks[index].append(piece)
        used[index] += piece.size
    if len(chunks) > 100:
        raise ValueError(f"{len(chunks)} chunks, at most 100: raise the cap")
    return chunks


def chunk_name(index: int) -> str:
    """The directory of chunk `index`."""
    return f"chunk-{index:02d}"


def reassemble_script(chunks: Sequence[Sequence[Piece]]) -> str:
    """A POSIX sh script, stored in chunk-00, that rebuilds every file from the chunks and checks SHA256SUMS."""
    where = {piece: chunk_name(i) for i, chunk in enumerate(chunks) for piece in chunk}
    lines = []
    for source in sorted({piece.source for piece in where}):
        parts = sorted((p for p in where if p.source == source), key=lambda p: p.offset)
        paths = " ".join(shlex.quote(f"{where[p]}/{p.target}") for p in parts)
        lines.append(f"put {shlex.quote(source)} {paths}\n")
    return (
        "#!/bin/sh\n"
        f"# Rebuilds the wheelhouse from its carry chunks, then checks every wheel: sh {chunk_name(0)}/{SCRIPT} [DEST]\n"
        "set -eu\n"
        'base=$(cd "$(dirname "$0")/.." && pwd)\n'
        'mkdir -p "${1:-$base}"\n'
        'dest=$(cd "${1:-$base}" && pwd)\n'
        'cd "$base"\n'
        "# A new file renamed into place: DEST may hold the very files the chunks link to.\n"
        'put() { name=$1; shift; cat "$@" >"$dest/.partial"; mv -f "$dest/.partial" "$dest/$name"; }\n'
        + "".join(lines)
        + f'cd "$dest" && sha256sum --check --quiet {SUMS}\n'
        'echo "wheelhouse reassembled and checked: $dest"\n'
    )


def plan_chunks(sizes: Mapping[str, int], cap: int) -> tuple[list[list[Piece]], str]:
    """The chunks and the reassemble script, which goes into chunk 0 with every chunk at most `cap` bytes."""
    pieces = split_pieces(sizes, cap)
    # Chunk names have a fixed width, so the script's length does not depend on where the pieces land.
    reserved = len(reassemble_script([pieces]).encode())
    chunks = pack(pieces, cap, reserved)
    script = reassemble_script(chunks)
    assert len(script.encode()) == reserved
    return chunks, script


def run(cmd: Sequence[str | Path], env: Mapping[str, str] | None = None) -> None:
    """Print a command, then run it; a failure stops the tool."""
    print("+ " + shlex.join(str(part) for part in cmd), flush=True)
    subprocess.run([str(part) for part in cmd], check=True, env=env)


def interpreter_version(path: str) -> str | None:
    """The major.minor version of a python executable, or None where it does not run (an inactive pyenv shim)."""
    probe = [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    try:
        return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def find_interpreter(python: str, given: str | None) -> str:
    """A working python of the target's version (given, on PATH or under pyenv), so markers evaluate as on the target."""
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{python}.*/bin/python{python}")), reverse=True)
    candidates = [given] if given else [shutil.which(f"python{python}"), *pyenv]
    found = next((path for path in candidates if path and interpreter_version(path) == python), None)
    if not found:
        raise SystemExit(f"no working python{python} among {candidates}: pass --interpreter")
    return found


def make_env(root: Path, interpreter: str, dists: Iterable[Dist]) -> Path:
    """A venv without pip whose site-packages holds a fake dist-info for each distribution; returns its python."""
    run([interpreter, "-m", "venv", "--without-pip", root])
    site = next(root.glob("lib/python*/site-packages"))
    for dist in dists:
        directory, files = dist_info(dist)
        (site / directory).mkdir()
        for name, text in files.items():
            (site / directory / name).write_text(text)
    return root / "bin" / "python"


def make_pip(root: Path, interpreter: str) -> Path:
    """A venv holding a recent pip, which drives the other environments through `pip --python`; returns its python."""
    run([interpreter, "-m", "venv", root])
    python = root / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--upgrade", RESOLVER_PIP])
    return python


def dry_run(
    pip: Path, env_python: Path, args: Sequence[str], report: Path, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The JSON report of `pip install --dry-run` into the environment of env_python."""
    cmd = [pip, "-m", "pip", "--python", env_python, "install", "--dry-run", "--quiet", "--report", report, *args]
    run(cmd, env)
    return json.loads(report.read_text())


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(MIB):
            digest.update(block)
    return digest.hexdigest()


def clear_stale(out: Path, keep: Iterable[str]) -> None:
    """Remove the chunks and the wheels of an earlier run that the new set does not hold."""
    kept = set(keep)
    for path in out.iterdir():
        if path.is_dir() and CHUNK_DIR.fullmatch(path.name):
            shutil.rmtree(path)
        elif path.suffix == ".whl" and path.name not in kept:
            path.unlink()


def download(pip: Path, out: Path, wheels: Sequence[Wheel], options: Sequence[str]) -> dict[str, str]:
    """Download exactly these wheels into out, hash-checked; returns their SHA-256 by file name."""
    clear_stale(out, (w.filename for w in wheels))
    (out / LOCK).write_text(lock_text(wheels))
    run([pip, "-m", "pip", "download", "--quiet", "--progress-bar", "off", "--no-deps", "--require-hashes",
         *options, "--dest", out, "--requirement", out / LOCK])
    hashes = {w.filename: sha256_file(out / w.filename) for w in wheels}
    wrong = [w.filename for w in wheels if hashes[w.filename] != w.sha256]
    if wrong:
        raise SystemExit(f"downloaded wheels differ from the resolution: {wrong}")
    return hashes


def write_chunks(out: Path, chunks: Sequence[Sequence[Piece]], script: str) -> None:
    """Fill chunk-NN directories: whole files as hard links, big files as NAME.part-NN copies, the script in chunk-00."""
    for index, chunk in enumerate(chunks):
        directory = out / chunk_name(index)
        directory.mkdir()
        for piece in chunk:
            if piece.target == piece.source:
                os.link(out / piece.source, directory / piece.target)
                continue
            with (out / piece.source).open("rb") as src, (directory / piece.target).open("wb") as dst:
                src.seek(piece.offset)
                dst.write(src.read(piece.size))
    (out / chunk_name(0) / SCRIPT).write_text(script)


def check_offline(pip: Path, work: Path, interpreter: str, wheelhouse: Path, dists: Iterable[Dist],
                  requirements: Sequence[str], options: Sequence[str], wheels: Sequence[Wheel]) -> None:
    """Resolve the requirement from the wheelhouse alone in a fresh environment; it must use every wheel and no other."""
    env_python = make_env(work / "check-env", interpreter, dists)
    args = ["--no-index", "--find-links", str(wheelhouse), *options, *requirements]
    report = dry_run(pip, env_python, args, work / "check.json", isolated_env(os.environ))
    chosen = {w.filename for w in wheels_from_report(report)}
    expected = {w.filename for w in wheels}
    if chosen != expected:
        raise SystemExit(f"offline check: unused {sorted(expected - chosen)}, unexpected {sorted(chosen - expected)}")
    print(f"offline check passed: {', '.join(requirements)} resolves from {wheelhouse} alone, with all {len(chosen)} wheels")


def summary(wheels: Sequence[Wheel], sizes: Mapping[str, int], chunks: Sequence[Sequence[Piece]]) -> str:
    """How many wheels, their total size, the biggest ones and the chunk count."""
    total = sum(sizes[w.filename] for w in wheels)
    biggest = sorted(wheels, key=lambda w: -sizes[w.filename])[:5]
    lines = [f"{len(wheels)} wheels, {total / MIB:.1f} MiB; biggest:"]
    lines += [f"  {sizes[w.filename] / MIB:8.1f} MiB  {w.filename}" for w in biggest]
    lines.append(f"{len(chunks)} chunks" if chunks else "not chunked")
    return "\n".join(lines)


def build(args: argparse.Namespace, work: Path) -> None:
    """Resolve, download, chunk and check the wheelhouse in args.out, with scratch environments under work."""
    text = args.provided.read_text()
    provided = parse_freeze(text)
    for line in unpinned_lines(text):
        print(f"warning: ignored, no version: {line} (write the freeze with `pip list --format=freeze`)", file=sys.stderr)
    interpreter = find_interpreter(args.python, args.interpreter)
    options = target_options(args.python, manylinux_platforms(args.glibc))
    pip = make_pip(work / "pip", interpreter)
    env_python = make_env(work / "env", interpreter, provided.values())
    wheels = wheels_from_report(dry_run(pip, env_python, [*options, *args.requirement], work / "report.json"))
    skipped = skipped_dists(wheels, args.skip)
    for name in sorted({canonical(n) for n in args.skip} - skipped.keys()):
        print(f"warning: --skip {name}: not in the closure", file=sys.stderr)
    if skipped:
        # Resolving again with the skipped distributions installed also drops what only they need.
        env_python = make_env(work / "env-skip", interpreter, [*provided.values(), *skipped.values()])
        wheels = wheels_from_report(dry_run(pip, env_python, [*options, *args.requirement], work / "report-skip.json"))
    for line in replacements(wheels, provided):
        print(f"warning: replaces a provided distribution: {line}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    hashes = download(pip, args.out, wheels, options)
    (args.out / SUMS).write_text(sums_text(hashes))
    manifest = {
        "requirements": args.requirement, "python": args.python, "glibc": args.glibc,
        "provided": {d.name: d.version for d in provided.values()},
        "skipped": {d.name: d.version for d in skipped.values()},
        "wheels": [{"name": w.name, "version": w.version, "file": w.filename, "sha256": w.sha256} for w in wheels],
    }
    (args.out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    sizes = {name: (args.out / name).stat().st_size for name in [*hashes, SUMS, LOCK, MANIFEST]}
    chunks: list[list[Piece]] = []
    wheelhouse = args.out
    if args.chunk_mib:
        chunks, script = plan_chunks(sizes, args.chunk_mib * MIB)
        write_chunks(args.out, chunks, script)
        wheelhouse = work / "reassembled"
        run(["sh", args.out / chunk_name(0) / SCRIPT, wheelhouse])
    check_offline(pip, work, interpreter, wheelhouse, [*provided.values(), *skipped.values()],
                  args.requirement, options, wheels)
    print(summary(wheels, sizes, chunks))


def argument_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requirement", action="append", required=True, help="pinned requirement, e.g. vllm==0.26.0")
    parser.add_argument("--python", required=True, help="the target's Python version, e.g. 3.12")
    parser.add_argument("--provided", required=True, type=Path, help="the target's `pip list --format=freeze` output")
    parser.add_argument("--skip", action="append", default=[], help="a dependency not to ship (repeatable)")
    parser.add_argument("--out", required=True, type=Path, help="wheelhouse directory to fill")
    parser.add_argument("--chunk-mib", type=int, default=58, help="carry chunk size cap in MiB; 0: no chunks")
    parser.add_argument("--glibc", default=DEFAULT_GLIBC, help=f"the target's glibc (default {DEFAULT_GLIBC})")
    parser.add_argument("--interpreter", help="a local python of the target's version (default: found on PATH or pyenv)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Build the wheelhouse with scratch environments in a temporary directory."""
    args = argument_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="offline-wheelhouse-") as work:
        try:
            build(args, Path(work))
        except subprocess.CalledProcessError as error:
            print(f"failed ({error.returncode}): {shlex.join(error.cmd)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
