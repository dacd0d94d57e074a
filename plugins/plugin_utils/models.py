"""Model weights: validate vllm_model_list, decide what to fetch, verify fetched files against their manifest.

Pure functions over plain data (Ansible module results are passed in as dicts); the vllm_model role calls them
through the filters in plugins/filter/vllm_fleet_models.py. Every message names the variable or file to fix.
"""

from __future__ import annotations

import base64
import json
import math
import posixpath
import re
from typing import Any, Optional

Model = dict[str, Any]
FileEntry = dict[str, Any]  # {"path": relative path, "size": bytes, "sha256": 64 lowercase hex}

VAR = "vllm_model_list"
MARKER = ".vllm-fleet-model.json"
MARKER_FORMAT = 1
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
URL = re.compile(r"^https?://[^\s/]+")
SOURCES = ("hf", "http", "controller")
COMMON_KEYS = {"name", "source", "served_model_name", "engine_args"}
SOURCE_KEYS = {
    "hf": {"repo", "revision", "include", "files"},
    "http": {"base_url", "files", "manifest"},
    "controller": {"controller_dir", "files", "manifest"},
}
# What hf download leaves inside --local-dir (and HF_HOME, which the role points there too): never part of a model.
HF_METADATA_DIR = ".cache"
# Free space asked for on top of the model: 5 % plus 256 MiB for temporary files and file-system overhead.
SPACE_MARGIN_BYTES = 256 * 1024**2
SPACE_MARGIN_RATIO = 0.05
GET_URL_MISMATCH = re.compile(r"did not match (?:sha256:)?([0-9a-fA-F]+); it was ([0-9a-fA-F]+)")


# --- reading the list ------------------------------------------------------------------------------------------


def _models(models: Any) -> list[Model]:
    """The well-formed entries of vllm_model_list (mappings); malformed ones are reported by problems()."""
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def _where(model: Model, index: int, key: str = "") -> str:
    """Name a model's variable as vllm_model_list[name=X].key (or [INDEX] while the name is unusable)."""
    name = model.get("name")
    ref = f"{VAR}[name={name}]" if isinstance(name, str) and name else f"{VAR}[{index}]"
    return f"{ref}.{key}" if key else ref


def manifest_paths(models: Any) -> list[str]:
    """Controller paths of the manifest files the list refers to, in order, without duplicates."""
    paths = [m["manifest"] for m in _models(models) if m.get("source") in ("http", "controller")
             and isinstance(m.get("manifest"), str)]
    return list(dict.fromkeys(paths))


def controller_dirs(model_lists: Any) -> list[str]:
    """Controller directories of the controller-source models of several hosts' lists, without duplicates."""
    dirs: list[str] = []
    for models in model_lists if isinstance(model_lists, list) else []:
        dirs += [m["controller_dir"] for m in _models(models)
                 if m.get("source") == "controller" and isinstance(m.get("controller_dir"), str)]
    return list(dict.fromkeys(d.rstrip("/") or "/" for d in dirs))


def files_from_find(found: list[dict[str, Any]], root: str) -> list[FileEntry]:
    """Turn ansible.builtin.find's files under root into manifest entries, sorted by path.

    hf's download metadata (.cache/) and the role's own marker are left out: neither is part of the model.
    """
    root = root.rstrip("/")
    entries = []
    for item in found:
        path = posixpath.relpath(item["path"], root)
        if path == MARKER or path.split("/")[0] == HF_METADATA_DIR:
            continue
        entry: FileEntry = {"path": path, "size": int(item["size"])}
        if item.get("checksum"):
            entry["sha256"] = str(item["checksum"]).lower()
        entries.append(entry)
    return sorted(entries, key=lambda e: e["path"])


def listings(find_results: list[dict[str, Any]]) -> dict[str, Optional[list[FileEntry]]]:
    """Map each directory of a looped find (with checksums) to its files, or None when it is not a directory."""
    out: dict[str, Optional[list[FileEntry]]] = {}
    for result in find_results:
        if "item" not in result or result.get("skipped"):
            continue
        directory = str(result["item"])
        missing = result.get("failed") or directory in (result.get("skipped_paths") or {})
        out[directory] = None if missing else files_from_find(result.get("files") or [], directory)
    return out


# --- manifests -------------------------------------------------------------------------------------------------


def _manifest_entry_problems(entries: Any, where: str) -> list[str]:
    """Problems of a manifest's file list: each entry needs a safe relative path, a size and a sha256."""
    if not isinstance(entries, list) or not entries:
        return [f"{where}: a manifest needs a non-empty list of files, each {{path, size, sha256}}"]
    problems = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{at}: {entry!r} is not a mapping; write {{path: ..., size: ..., sha256: ...}}")
            continue
        path = entry.get("path")
        parts = path.split("/") if isinstance(path, str) else []
        if (not isinstance(path, str) or not path or path.startswith("/") or "\\" in path
                or any(p in ("", ".", "..") for p in parts)):
            problems.append(f"{at}.path: {path!r} must be a relative path inside the model (no '..', no leading '/')")
        elif path == MARKER or parts[0] == HF_METADATA_DIR:
            problems.append(f"{at}.path: {path!r} is reserved (the role's marker or hf's .cache/); remove the entry")
        elif path in seen:
            problems.append(f"{at}.path: {path!r} is listed twice; keep one entry per file")
        else:
            seen.add(path)
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            problems.append(f"{at}.size: {size!r} must be the file's size in bytes (an integer), e.g. from stat -c %s")
        sha = entry.get("sha256")
        if not isinstance(sha, str) or not SHA256.match(sha):
            problems.append(f"{at}.sha256: {sha!r} must be 64 hex digits, e.g. from sha256sum")
    return problems


def _normalised(entries: list[dict[str, Any]]) -> list[FileEntry]:
    """A valid manifest file list as {path, size, sha256} with lowercase digests, sorted by path."""
    return sorted(({"path": e["path"], "size": int(e["size"]), "sha256": str(e["sha256"]).lower()} for e in entries),
                  key=lambda e: e["path"])


def _parse_manifest(text: Optional[str], path: str, where: str) -> tuple[Optional[list[Any]], list[str]]:
    """Parse a manifest.json read on the controller into its raw file list, or explain why it cannot be used."""
    if text is None:
        return None, [f"{where}: {path} does not exist or is unreadable on the controller; "
                      "fix the path (absolute, on the controller) or create the manifest"]
    try:
        data = json.loads(text)
    except ValueError as error:
        return None, [f"{where}: {path} is not valid JSON ({error}); write "
                      '{"name": ..., "files": [{"path": ..., "size": ..., "sha256": ...}]}']
    if not isinstance(data, dict) or "files" not in data:
        return None, [f"{where}: {path} has no top-level \"files\" list"]
    problems = _manifest_entry_problems(data["files"], f"{where} ({path}) files")
    return (None if problems else data["files"]), problems


def _declared_files(model: Model, texts: dict[str, Optional[str]], index: int) -> tuple[Optional[list[Any]], list[str]]:
    """The manifest a model declares (inline files or a controller manifest file) and its problems."""
    if "files" in model:
        problems = _manifest_entry_problems(model["files"], _where(model, index, "files"))
        return (None if problems else model["files"]), problems
    if "manifest" in model:
        path = model["manifest"]
        if not isinstance(path, str) or not path.startswith("/"):
            return None, [f"{_where(model, index, 'manifest')}: {path!r} must be an absolute path on the controller, "
                          "e.g. \"{{ inventory_dir }}/models/NAME/manifest.json\""]
        return _parse_manifest(texts.get(path), path, _where(model, index, "manifest"))
    return None, []


def _compare(declared: list[FileEntry], actual: list[FileEntry]) -> list[str]:
    """Differences between a declared manifest and the files found: missing, wrong size, wrong sha256."""
    found = {e["path"]: e for e in actual}
    problems = []
    for entry in declared:
        got = found.get(entry["path"])
        if got is None:
            problems.append(f"file {entry['path']} is missing")
        elif got["size"] != entry["size"]:
            problems.append(f"file {entry['path']}: expected {entry['size']} bytes, actual {got['size']} bytes")
        elif got.get("sha256") != entry["sha256"]:
            problems.append(f"file {entry['path']}: expected sha256 {entry['sha256']}, "
                            f"actual sha256 {got.get('sha256')}")
    return problems


# --- validation ------------------------------------------------------------------------------------------------


def _source_problems(model: Model, index: int, texts: dict[str, Optional[str]],
                     found: dict[str, Optional[list[FileEntry]]]) -> list[str]:
    """Problems of the keys that depend on the model's source."""
    source = model["source"]

    def where(key: str) -> str:
        """Name one key of this model."""
        return _where(model, index, key)

    problems = []
    if "files" in model and "manifest" in model:
        problems.append(f"{where('files')}: give either files or manifest, not both")
    declared, manifest_problems = _declared_files(model, texts, index)
    problems += manifest_problems
    if source == "hf":
        if not isinstance(model.get("repo"), str) or not HF_REPO.match(model["repo"]):
            problems.append(f"{where('repo')}: {model.get('repo')!r} must be a Hugging Face repo id OWNER/NAME, "
                            "e.g. Qwen/Qwen2.5-7B-Instruct-AWQ")
        revision = model.get("revision")
        if not isinstance(revision, str) or not COMMIT.match(revision):
            problems.append(f"{where('revision')}: {revision!r} is an unpinned Hugging Face revision (a branch or tag "
                            "can move under you); set it to the 40-hex commit sha, e.g. from "
                            f"`git ls-remote https://huggingface.co/{model.get('repo', 'OWNER/NAME')} main`")
        include = model.get("include", [])
        if not isinstance(include, list) or not all(isinstance(p, str) and p for p in include):
            problems.append(f"{where('include')}: {include!r} must be a list of glob patterns, "
                            "e.g. ['*.json', '*.safetensors']")
    elif source == "http":
        if not isinstance(model.get("base_url"), str) or not URL.match(model["base_url"]):
            problems.append(f"{where('base_url')}: {model.get('base_url')!r} must be the http(s) URL the manifest's "
                            "paths are relative to, e.g. https://mirror.example/models/NAME")
        if "files" not in model and "manifest" not in model:
            problems.append(f"{where('files')}: an http model needs a manifest: set files (inline) or manifest "
                            "(a manifest.json on the controller), so every download is checked against a sha256 "
                            "you trust")
    elif source == "controller":
        directory = model.get("controller_dir")
        if not isinstance(directory, str) or not directory.startswith("/"):
            problems.append(f"{where('controller_dir')}: {directory!r} must be an absolute directory on the controller")
        else:
            listing = found.get(directory.rstrip("/") or "/")
            if listing is None:
                problems.append(f"{where('controller_dir')}: {directory} does not exist on the controller "
                                "(or is not a directory); fix the path or put the model there")
            elif not listing:
                problems.append(f"{where('controller_dir')}: {directory} holds no files")
            elif declared is not None:
                problems += [f"{where('controller_dir')}: {p} in {directory} (the controller's copy does not match the "
                             "manifest: fix the copy, or the manifest if the copy is right)"
                             for p in _compare(_normalised(declared), listing)]
    return problems


def problems(models: Any, manifest_texts: dict[str, Optional[str]],
             controller_listings: dict[str, Optional[list[FileEntry]]]) -> list[str]:
    """Everything wrong with vllm_model_list, each problem naming the variable and the fix (empty when valid)."""
    if not isinstance(models, list):
        return [f"{VAR}: {models!r} must be a list of models, each a mapping with name and source"]
    found: list[str] = []
    seen: set[str] = set()
    for index, model in enumerate(models):
        if not isinstance(model, dict):
            found.append(f"{VAR}[{index}]: {model!r} is not a mapping; give name, source and the source's keys")
            continue
        name = model.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            found.append(f"{_where(model, index, 'name')}: {name!r} must match ^[a-z0-9][a-z0-9._-]*$ "
                         "(it names the model's directory)")
        elif name in seen:
            found.append(f"{_where(model, index, 'name')}: {name} is listed twice; model names must be unique per host")
        else:
            seen.add(name)
        source = model.get("source")
        if source not in SOURCES:
            found.append(f"{_where(model, index, 'source')}: unknown source {source!r}; "
                         f"use one of {', '.join(SOURCES)}")
            continue
        unknown = sorted(set(model) - COMMON_KEYS - SOURCE_KEYS[source])
        if unknown:
            found.append(f"{_where(model, index)}: unknown keys {unknown} for source {source}; allowed: "
                         f"{sorted(COMMON_KEYS | SOURCE_KEYS[source])}")
        served = model.get("served_model_name", name)
        if not isinstance(served, str) or not served.strip():
            found.append(f"{_where(model, index, 'served_model_name')}: {served!r} must be a non-empty string")
        if not isinstance(model.get("engine_args", {}), dict):
            found.append(f"{_where(model, index, 'engine_args')}: must be a mapping such as {{quantization: awq}}")
        found += _source_problems(model, index, manifest_texts, controller_listings)
    return found


# --- what is wanted --------------------------------------------------------------------------------------------


def wanted(models: list[Model], manifest_texts: dict[str, Optional[str]],
           controller_listings: dict[str, Optional[list[FileEntry]]]) -> list[Model]:
    """Resolve a valid vllm_model_list into what each model should be on disk.

    files is the manifest to install and verify, or None for an hf model without one (trust on first use: the
    role records the sha256 of what it downloaded). size is the total in bytes, None when unknown.
    """
    out = []
    for index, model in enumerate(models):
        source = model["source"]
        declared = _declared_files(model, manifest_texts, index)[0]
        files: Optional[list[FileEntry]] = _normalised(declared) if declared is not None else None
        if source == "hf":
            origin = {"repo": model["repo"], "revision": model["revision"], "include": list(model.get("include", []))}
        elif source == "http":
            origin = {"base_url": model["base_url"].rstrip("/")}
        else:
            directory = model["controller_dir"].rstrip("/") or "/"
            origin = {"controller_dir": directory}
            if files is None:
                files = [dict(e) for e in controller_listings[directory] or []]
        include = list(model.get("include", []))
        if source == "hf" and not include and files is not None:
            include = [e["path"] for e in files]  # fetch exactly the manifest's files
        out.append({
            "name": model["name"],
            "source": source,
            "served_model_name": model.get("served_model_name", model["name"]),
            "engine_args": dict(model.get("engine_args", {})),
            "origin": origin,
            "include": include,
            "files": files,
            "size": sum(e["size"] for e in files) if files is not None else None,
        })
    return out


def marker(model: Model, files: list[FileEntry]) -> dict[str, Any]:
    """The content of a model's marker file: where it came from and the manifest it was verified against."""
    return {"vllm_fleet_model": MARKER_FORMAT, "name": model["name"], "source": model["source"],
            "origin": model["origin"], "files": files}


def _decode(slurped: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The marker slurped from a host, parsed; None when absent or unreadable."""
    if not slurped or slurped.get("failed") or "content" not in slurped:
        return None
    try:
        data = json.loads(base64.b64decode(slurped["content"]).decode("utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def state(model: Model, installed_marker: Optional[dict[str, Any]], installed: list[FileEntry]) -> str:
    """Why a model must be fetched again, or "" when the installed copy is the wanted one and complete.

    The marker is compared, not the bytes: hashing every file on every run would cost minutes on large models.
    Each listed file is still checked for presence and size, which catches deletion and truncation.
    """
    if installed_marker is None:
        return "not installed"
    if installed_marker.get("vllm_fleet_model") != MARKER_FORMAT or not isinstance(installed_marker.get("files"), list):
        return "its marker is from another format"
    if model["files"] is not None:
        if installed_marker["files"] != model["files"]:
            return "the manifest changed"
    elif installed_marker.get("source") != model["source"] or installed_marker.get("origin") != model["origin"]:
        return "repo, revision or include changed"
    recorded = {e.get("path"): e.get("size") for e in installed_marker["files"] if isinstance(e, dict)}
    on_disk = {e["path"]: e["size"] for e in installed}
    for path, size in sorted(recorded.items()):
        if path not in on_disk:
            return f"file {path} is missing"
        if on_disk[path] != size:
            return f"file {path} has {on_disk[path]} bytes instead of {size}"
    extra = sorted(set(on_disk) - set(recorded))
    if extra:
        return f"file {extra[0]} is not part of the model"
    return ""


def plan(models: list[Model], model_dir: str, found: list[dict[str, Any]],
         markers: list[dict[str, Any]]) -> list[Model]:
    """The models to fetch, each with a reason, from one find over vllm_fleet_model_dir and the slurped markers."""
    model_dir = model_dir.rstrip("/")
    by_marker = {posixpath.basename(posixpath.dirname(str(r.get("item", "")))): _decode(r) for r in markers}
    todo = []
    for model in models:
        root = f"{model_dir}/{model['name']}"
        mine = [f for f in found if str(f["path"]).startswith(root + "/")]
        reason = state(model, by_marker.get(model["name"]), files_from_find(mine, root))
        if reason:
            todo.append({**model, "reason": reason})
    return todo


def marker_paths(model_dir: str, found: list[dict[str, Any]]) -> list[str]:
    """The marker files among a find over vllm_fleet_model_dir (one per installed model directory)."""
    model_dir = model_dir.rstrip("/")
    return sorted(str(f["path"]) for f in found
                  if posixpath.basename(str(f["path"])) == MARKER
                  and posixpath.dirname(posixpath.dirname(str(f["path"]))) == model_dir)


# --- fetching --------------------------------------------------------------------------------------------------


def subdirs(files: list[FileEntry]) -> list[str]:
    """The directories (relative, parents first) that the manifest's files live in."""
    dirs: set[str] = set()
    for entry in files:
        parent = posixpath.dirname(entry["path"])
        while parent:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(dirs, key=lambda d: (d.count("/"), d))


def space_problem(host: str, model_dir: str, model: Model, df_stdout: str) -> str:
    """The free-space failure message, or "" when `df --output=avail -B1` reports room for the model."""
    lines = [line.strip() for line in df_stdout.splitlines() if line.strip()]
    free = int(lines[-1])
    needed = int(model["size"] * (1 + SPACE_MARGIN_RATIO)) + SPACE_MARGIN_BYTES
    if free >= needed:
        return ""
    tenths = 1024**3 / 10  # free rounded down, needed rounded up: the message never understates the gap
    return (f"{host}: vllm_fleet_model_dir ({model_dir}) has {math.floor(free / tenths) / 10:.1f} GiB free, model "
            f"{model['name']} needs {math.ceil(needed / tenths) / 10:.1f} GiB: free space or point vllm_fleet_model_dir "
            "at a larger disk")


def _fix(model: Model) -> str:
    """What to do when fetched bytes do not match the manifest, by source."""
    origin = model["origin"]
    if model["source"] == "http":
        return (f"fix the file on the mirror ({origin['base_url']}), or, if the mirror is right, the manifest's sha256 "
                "(recompute it with sha256sum where you trust the file)")
    if model["source"] == "controller":
        return (f"the files in {origin['controller_dir']} changed during the copy or differ from the manifest: "
                "fix them or the manifest and run again")
    return (f"the manifest in {VAR}[name={model['name']}].files does not match {origin['repo']}@{origin['revision']}: "
            "take the sha256 from the hub's file metadata (LFS sha256) or drop files to trust the first download")


def verify(host: str, model: Model, root: str, found: list[dict[str, Any]],
           stat_results: list[dict[str, Any]]) -> dict[str, Any]:
    """Check the fetched files against the manifest (or record them, for hf without one).

    Returns {"message": "" or the failure naming host, model, file, expected and actual sha256 and the fix,
    "files": the manifest to record in the marker}.
    """
    digests = {str(r["item"]): (r.get("stat") or {}).get("checksum") for r in stat_results if "item" in r}
    fetched = files_from_find(found, root)
    actual = [{**e, "sha256": digests.get(e["path"])} for e in fetched]
    if model["files"] is None:
        return {"message": "" if fetched else f"{host}: model {model['name']}: the download produced no files; "
                "check repo, revision and include", "files": actual}
    issues = _compare(model["files"], actual)
    issues += [f"file {p} was fetched but is not in the manifest"
               for p in sorted({e["path"] for e in fetched} - {e["path"] for e in model["files"]})]
    message = ""
    if issues:
        message = (f"{host}: model {model['name']} failed verification: {'; '.join(issues)}. Fix: {_fix(model)}.")
    return {"message": message, "files": model["files"]}


def _item_path(item: Any) -> str:
    """The file a loop item stands for: a manifest entry (get_url, copy) or a relative path (stat)."""
    return str(item.get("path")) if isinstance(item, dict) else str(item)


def failure(host: str, model: Model, partial: str, result: dict[str, Any]) -> str:
    """The message for a failed fetch, from the failed task's result (a loop's results are searched item by item)."""
    text = str(result.get("msg") or "").strip()
    items = [r for r in result.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:
        details = []
        for item in items:
            match = GET_URL_MISMATCH.search(str(item.get("msg", "")))
            details.append(f"file {_item_path(item.get('item'))}: " + (
                f"expected sha256 {match.group(1).lower()}, actual sha256 {match.group(2).lower()}" if match
                else str(item.get("msg", "")).strip().rstrip(".")))
        mismatch = any(GET_URL_MISMATCH.search(str(item.get("msg", ""))) for item in items)
        text = "; ".join(details) + (f". Fix: {_fix(model)}" if mismatch else "")
    elif not text.startswith(f"{host}: "):
        stderr = str(result.get("stderr") or "").strip()
        text = f"{text} {stderr[-1500:]}".strip() or "the fetch failed"
    if not text.startswith(f"{host}: "):
        text = f"{host}: model {model['name']} was not installed: {text}"
    return (f"{text.rstrip('.')}. Removed the partial download {partial}; the model installed before, "
            "if any, is unchanged.")


def published(models: list[Model], model_dir: str) -> dict[str, dict[str, Any]]:
    """The vllm_models fact: name -> path, served_model_name, engine_args and source, for the scenes."""
    model_dir = model_dir.rstrip("/")
    return {m["name"]: {"path": f"{model_dir}/{m['name']}", "served_model_name": m["served_model_name"],
                        "engine_args": m["engine_args"], "source": m["source"]} for m in models}
