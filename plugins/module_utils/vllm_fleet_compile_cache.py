"""Compile-cache bundles of the vllm.fleet.compile_cache module: pack a scene's compiled artefacts, seed a cache from
a bundle only after its digest and key check out, and publish bundles on the controller.

Ansible ships this file to the managed host with the module, so it is stdlib only and runs on Python 3.8+.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Tuple

MANIFEST = "vllm-fleet-compile-cache.json"
# The file in a scene's cache directory that names the bundle whose artefacts the cache holds.
RECORD = ".vllm-fleet-compile-cache"
FORMAT = 1
CHUNK = 1 << 20
# A pax header of our own: the exact modification time, which tar's float mtime cannot carry.
MTIME_NS = "VLLM_FLEET.mtime_ns"
NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}-[0-9a-f]{16}$")


class BundleError(Exception):
    """A bundle that must not be used; the message says why."""


def sha256_file(path: str) -> str:
    """Return the SHA-256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_record(scene_cache: str) -> str:
    """Return the bundle name a scene's cache records, or '' when it records none (or anything but a name)."""
    # The cache belongs to the service user: never follow a link it put there, read no more than a name.
    try:
        fd = os.open(os.path.join(scene_cache, RECORD), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            text = handle.read(64).decode("ascii", errors="replace").strip()
    except OSError:
        return ""
    return text if NAME.match(text) else ""


def write_record(scene_cache: str, name: str) -> bool:
    """Record that a scene's cache holds the artefacts of bundle `name`; return whether the record changed."""
    if read_record(scene_cache) == name:
        return False
    fd, temporary = tempfile.mkstemp(dir=scene_cache, prefix=RECORD + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(name + "\n")
        os.fchmod(handle.fileno(), 0o644)
    os.replace(temporary, os.path.join(scene_cache, RECORD))
    return True


def present_parts(scene_cache: str, parts: List[str]) -> List[str]:
    """Return the parts of a scene's cache that hold something, reached through real directories only (a link the
    service user put in its cache could otherwise pack any of the host's files)."""
    present = []
    for part in parts:
        path, inside = scene_cache, True
        for name in part.split("/"):
            path = os.path.join(path, name)
            inside = inside and os.path.isdir(path) and not os.path.islink(path)
        if inside and os.listdir(path):
            present.append(part)
    return present


def pack(scene_cache: str, parts: List[str], name: str, key: Dict[str, Any], archive: str, compressor: str) -> int:
    """Write the scene's compiled parts and a manifest naming the key into a zstd tar at archive; return its size."""
    manifest = json.dumps({"vllm_fleet_compile_cache": FORMAT, "name": name, "key": key}, sort_keys=True).encode()
    if os.path.lexists(archive):
        os.unlink(archive)
    fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as sink:
        zstd = subprocess.Popen(compressor.split() + ["-c"], stdin=subprocess.PIPE, stdout=sink)
        if zstd.stdin is None:  # never with stdin=PIPE; not an assert, which python -O drops (ansible-test's no-assert)
            raise AssertionError("the compressor has no stdin pipe")
        try:
            with tarfile.open(fileobj=zstd.stdin, mode="w|") as tar:
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mode, info.mtime = len(manifest), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(manifest))
                for part in present_parts(scene_cache, parts):
                    # Only files and directories travel: a cache's links and sockets belong to its own host.
                    tar.add(os.path.join(scene_cache, part), arcname=part,
                            filter=lambda info: _regular_only(info, scene_cache))
        finally:
            zstd.stdin.close()
            code = zstd.wait()
    if code != 0:
        raise BundleError(f"{compressor} exited with {code} while packing {archive}")
    return os.path.getsize(archive)


def _regular_only(info: tarfile.TarInfo, scene_cache: str) -> Optional[tarfile.TarInfo]:
    """Keep regular files and directories, owned by nobody in particular, with exact times; drop everything else."""
    if not (info.isreg() or info.isdir()):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    # tar's float mtime moves a time by up to ~120 ns, and ninja rebuilds an object newer than the time it logged.
    info.pax_headers = {**info.pax_headers, MTIME_NS: str(os.lstat(os.path.join(scene_cache, info.name)).st_mtime_ns)}
    return info


def _mtime_ns(info: tarfile.TarInfo) -> int:
    """Return a member's modification time in nanoseconds: exact where the bundle recorded it, else tar's own."""
    exact = info.pax_headers.get(MTIME_NS, "")
    return int(exact) if exact.isdigit() else int(info.mtime * 1_000_000_000)


def _safe_member(info: tarfile.TarInfo, parts: List[str]) -> str:
    """Return a member's relative path, or raise BundleError for anything that could land outside the cache."""
    path = os.path.normpath(info.name)
    if info.name.startswith("/") or path.startswith("..") or "/../" in f"/{info.name}/":
        raise BundleError(f"member {info.name!r} points outside the cache")
    if not (info.isreg() or info.isdir()):
        raise BundleError(f"member {info.name!r} is neither a file nor a directory")
    if path != MANIFEST and not any(path == p or path.startswith(p + "/") or (info.isdir() and p.startswith(path + "/"))
                                    for p in parts):
        raise BundleError(f"member {info.name!r} is not part of a compile cache ({', '.join(parts)})")
    return path


def _members(archive: IO[bytes], compressor: str) -> Iterator[Tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """Yield the members of an open zstd tar with the tar, reading it as one stream; raise BundleError if broken."""
    with tempfile.TemporaryFile() as errors:
        zstd = subprocess.Popen(compressor.split() + ["-dc"], stdin=archive, stdout=subprocess.PIPE, stderr=errors)
        if zstd.stdout is None:  # never with stdout=PIPE
            raise AssertionError("the decompressor has no stdout pipe")
        try:
            with tarfile.open(fileobj=zstd.stdout, mode="r|") as tar:
                for info in tar:
                    yield info, tar
        except (tarfile.TarError, EOFError) as error:
            raise BundleError(f"the archive is damaged: {error}") from None
        finally:
            zstd.stdout.close()
            code = zstd.wait()
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip()
        if code != 0:
            raise BundleError(f"the archive is damaged: {said or compressor + ' exited with ' + str(code)}")


def extract(archive: IO[bytes], staging: str, parts: List[str], key: Dict[str, Any], compressor: str,
            uid: int, gid: int) -> None:
    """Unpack a bundle into staging, owned by uid:gid, after checking each member and that its manifest names key."""
    manifest_seen = False
    for info, tar in _members(archive, compressor):
        path = _safe_member(info, parts)
        if path == MANIFEST:
            source = tar.extractfile(info)
            found = json.loads(source.read().decode()) if source else {}
            if found.get("key") != key:
                raise BundleError("it was built for another release, platform, model or scene configuration "
                                  f"(its key: {json.dumps(found.get('key'), sort_keys=True)[:600]})")
            manifest_seen = True
            continue
        if not manifest_seen:
            raise BundleError("its manifest does not come first")
        target = os.path.join(staging, path)
        _make_dirs(staging, path if info.isdir() else os.path.dirname(path), uid, gid)
        if info.isreg():
            source = tar.extractfile(info)
            if source is None:  # never for a regular file
                raise AssertionError(f"{path}: tar gives no reader for a regular file")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as sink:
                shutil.copyfileobj(source, sink, CHUNK)
            # The service needs what it compiled as it was: executable kernels stay executable; nothing setuid.
            os.chmod(target, 0o750 if info.mode & 0o100 else 0o640)
            mtime_ns = _mtime_ns(info)
            os.utime(target, ns=(mtime_ns, mtime_ns))
            os.chown(target, uid, gid)
    if not manifest_seen:
        raise BundleError("it holds no manifest")


def _make_dirs(staging: str, relative: str, uid: int, gid: int) -> None:
    """Create each missing directory of relative under staging, 0750 and owned by uid:gid."""
    current = staging
    for name in [n for n in relative.split("/") if n not in ("", ".")]:
        current = os.path.join(current, name)
        if not os.path.isdir(current):
            os.mkdir(current, 0o750)
            os.chown(current, uid, gid)


def merge_into(staging: str, scene_cache: str) -> List[str]:
    """Move what staging holds into the cache where the cache lacks it, a whole subtree per rename; return what moved.

    Nothing of the cache is replaced: an entry the cache already has keeps the host's own version."""
    moved = []
    for entry in sorted(os.listdir(staging)):
        source, target = os.path.join(staging, entry), os.path.join(scene_cache, entry)
        if not os.path.lexists(target):
            os.rename(source, target)
            moved.append(entry)
        elif os.path.isdir(source) and not os.path.islink(target) and os.path.isdir(target):
            moved += [f"{entry}/{inner}" for inner in merge_into(source, target)]
    return moved


def seed(archive: str, checksum: str, scene_cache: str, name: str, key: Dict[str, Any], parts: List[str],
         compressor: str, uid: int, gid: int) -> List[str]:
    """Seed a scene's cache from a bundle: digest first, then a private staging unpack, then the moves; return them.

    Raises BundleError (the cache untouched, the staging removed) when the bundle must not be used."""
    try:
        actual = sha256_file(archive)
    except OSError as error:
        raise BundleError(f"it could not be read: {error}") from None
    if actual != checksum:
        raise BundleError(f"its SHA-256 is {actual}, not the published {checksum}")
    # mkdtemp makes it 0700; beside the cache (in the scenes' root-owned directory), so each move is a rename on one
    # file system. The scene's own user unpacks and moves: its cache is that user's, and root never writes where
    # the scene could have planted a link.
    staging = tempfile.mkdtemp(prefix=f".staging-{os.path.basename(scene_cache)}-", dir=os.path.dirname(scene_cache))
    try:
        os.chown(staging, uid, gid)
        with open(archive, "rb") as source:
            return _as_user(uid, gid, lambda: _unpack(source, staging, scene_cache, name, parts, key, compressor,
                                                      uid, gid))
    except OSError as error:
        raise BundleError(f"unpacking it failed: {error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _unpack(archive: IO[bytes], staging: str, scene_cache: str, name: str, parts: List[str], key: Dict[str, Any],
            compressor: str, uid: int, gid: int) -> List[str]:
    """Unpack a bundle into staging and move what the cache lacks into it; return what moved."""
    try:
        extract(archive, staging, parts, key, compressor, uid, gid)
        moved = merge_into(staging, scene_cache)
        write_record(scene_cache, name)
    except (tarfile.TarError, EOFError) as error:
        raise BundleError(f"the archive is damaged: {error}") from None
    except OSError as error:  # a full disk, for one
        raise BundleError(f"unpacking it failed: {error}") from None
    return moved


def _as_user(uid: int, gid: int, work: Callable[[], List[str]]) -> List[str]:
    """Return work() run as uid:gid alone (no other group): in a child process unless this process is that already."""
    if (uid, gid) == (os.geteuid(), os.getegid()):
        return work()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, work, report as JSON, and never return into the module
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            outcome: Dict[str, Any] = {"moved": work()}
        except BundleError as error:
            outcome = {"refused": str(error)}
        except Exception as error:  # whatever it is, the parent reports it as the refusal
            outcome = {"refused": f"unpacking it failed: {error}"}
        with os.fdopen(write, "w") as out:
            json.dump(outcome, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as got:
        said = got.read()
    os.waitpid(pid, 0)
    outcome = json.loads(said) if said else {"refused": "the unpacking process ended without a word"}
    if "refused" in outcome:
        raise BundleError(outcome["refused"])
    return list(outcome["moved"])


def publish(incoming: str, store: str, name: str, key: Dict[str, Any], keep: int) -> Dict[str, Any]:
    """Publish a fetched bundle in the controller's store under its digest, then its index entry; prune the scene's.

    The index entry (NAME.json) is written last and atomically: a reader sees a whole bundle or none."""
    checksum = sha256_file(incoming)
    archive = f"{name}.{checksum[:16]}.tar.zst"
    os.replace(incoming, os.path.join(store, archive))
    os.chmod(os.path.join(store, archive), 0o600)
    entry = {"vllm_fleet_compile_cache": FORMAT, "name": name, "scene": key["scene"], "archive": archive,
             "sha256": checksum, "size": os.path.getsize(os.path.join(store, archive)), "published": time.time(),
             "key": key}
    previous = index(store).get(name)
    _write_json(os.path.join(store, name + ".json"), entry)
    if previous and previous["archive"] != archive:
        _remove(os.path.join(store, previous["archive"]))
    pruned = doomed(list(index(store).values()), keep)
    for old in pruned:
        stale = index(store).get(old)
        _remove(os.path.join(store, old + ".json"))
        if stale:
            _remove(os.path.join(store, stale["archive"]))
    return {"archive": archive, "sha256": checksum, "pruned": pruned}


def doomed(published: List[Dict[str, Any]], keep: int) -> List[str]:
    """Return the bundle names to delete so that at most `keep` of each scene remain per platform and release, the
    newest kept (a mixed fleet keeps each kind of host's own)."""
    by_scene: Dict[str, List[Dict[str, Any]]] = {}
    for entry in published:
        key = entry.get("key") or {}
        group = json.dumps([entry.get("scene"), key.get("platform"), key.get("release")], sort_keys=True)
        by_scene.setdefault(group, []).append(entry)
    out: List[str] = []
    for entries in by_scene.values():
        ordered = sorted(entries, key=lambda e: (e.get("published", 0), e["name"]), reverse=True)
        out += [e["name"] for e in ordered[max(keep, 1):]]
    return sorted(out)


def index(store: str) -> Dict[str, Dict[str, Any]]:
    """Return the store's published bundles by name (entries that do not parse are left out)."""
    out = {}
    for file_name in os.listdir(store):
        if file_name.endswith(".json"):
            try:
                with open(os.path.join(store, file_name), encoding="utf-8") as handle:
                    entry = json.load(handle)
                out[entry["name"]] = entry
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return out


def _write_json(path: str, data: Dict[str, Any]) -> None:
    """Write JSON to path through a temporary file and a rename."""
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".index-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def _remove(path: str) -> None:
    """Remove a file if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
