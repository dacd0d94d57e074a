"""Unit tests of plugins/plugin_utils/models.py: validation, planning, verification and messages of the vllm_model role."""

from __future__ import annotations

import base64
import json
from typing import Any, Optional

import pytest

from ansible_collections.vllm.fleet.plugins.plugin_utils import models

SHA_A = "a" * 64
SHA_B = "b" * 64
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HOST = "gpu1"
MODEL_DIR = "/var/lib/vllm/models"
FILES = [{"path": "config.json", "size": 10, "sha256": SHA_A},
         {"path": "weights/model.safetensors", "size": 20, "sha256": SHA_B}]


def http_model(**extra: Any) -> dict[str, Any]:
    """A valid http model with an inline manifest."""
    return {"name": "tiny", "source": "http", "base_url": "http://mirror/tiny", "files": FILES, **extra}


def hf_model(**extra: Any) -> dict[str, Any]:
    """A valid hf model pinned to a commit."""
    return {"name": "qwen", "source": "hf", "repo": "Qwen/Qwen2.5-7B-Instruct-AWQ", "revision": COMMIT, **extra}


def problems(model_list: Any, texts: Optional[dict[str, Optional[str]]] = None,
             listings: Optional[dict[str, Any]] = None) -> list[str]:
    """models.problems with empty controller state by default."""
    return models.problems(model_list, texts or {}, listings or {})


def find_file(path: str, size: int, checksum: str = "") -> dict[str, Any]:
    """One file as ansible.builtin.find reports it."""
    return {"path": path, "size": size, **({"checksum": checksum} if checksum else {})}


def slurped(path: str, content: dict[str, Any]) -> dict[str, Any]:
    """One marker as a looped ansible.builtin.slurp reports it."""
    return {"item": path, "content": base64.b64encode(json.dumps(content).encode()).decode()}


# --- validation ---


def test_valid_models_have_no_problems() -> None:
    """A valid hf, http and controller model pass."""
    ctl = {"name": "local", "source": "controller", "controller_dir": "/srv/local"}
    listing = {"/srv/local": [{"path": "config.json", "size": 1, "sha256": SHA_A}]}
    assert problems([hf_model(), http_model(), ctl], listings=listing) == []


@pytest.mark.parametrize("revision", ["main", "v1.0", COMMIT[:12], COMMIT.upper(), None])
def test_unpinned_hf_revision_is_refused(revision: Any) -> None:
    """A branch, tag, short or missing sha is an unpinned revision, named with its variable."""
    [problem] = problems([hf_model(revision=revision)])
    assert problem.startswith("vllm_model_list[name=qwen].revision:")
    assert "unpinned Hugging Face revision" in problem and "git ls-remote" in problem


@pytest.mark.parametrize("name", ["Qwen", "-x", ".hidden", "a b", "", None])
def test_invalid_names_are_refused(name: Any) -> None:
    """Names must match ^[a-z0-9][a-z0-9._-]*$ (they become directories)."""
    assert any(".name:" in p and "^[a-z0-9]" in p for p in problems([http_model(name=name)]))


def test_duplicates_unknown_sources_and_keys() -> None:
    """Duplicate names, an unknown source and a typo in a key are each reported."""
    found = problems([http_model(), http_model(), {"name": "x", "source": "s3"}, hf_model(revison=COMMIT)])
    assert any("listed twice" in p for p in found)
    assert any(p.startswith("vllm_model_list[name=x].source: unknown source 's3'") for p in found)
    assert any("unknown keys ['revison']" in p for p in found)


def test_http_needs_base_url_and_a_manifest() -> None:
    """http without base_url or without files/manifest is refused."""
    found = problems([{"name": "m", "source": "http"}])
    assert any(p.startswith("vllm_model_list[name=m].base_url:") for p in found)
    assert any(p.startswith("vllm_model_list[name=m].files:") and "manifest" in p for p in found)


@pytest.mark.parametrize("entry, key", [
    ({"path": "a", "size": 1, "sha256": "abc"}, "sha256"),
    ({"path": "a", "sha256": SHA_A}, "size"),
    ({"path": "a", "size": True, "sha256": SHA_A}, "size"),
    ({"path": "../etc/passwd", "size": 1, "sha256": SHA_A}, "path"),
    ({"path": "/abs", "size": 1, "sha256": SHA_A}, "path"),
    ({"path": ".vllm-fleet-model.json", "size": 1, "sha256": SHA_A}, "path"),
])
def test_bad_manifest_entries(entry: dict[str, Any], key: str) -> None:
    """Entries need a safe relative path, an integer size and a 64-hex sha256."""
    [problem] = problems([http_model(files=[entry])])
    assert problem.startswith(f"vllm_model_list[name=tiny].files[0].{key}:")


def test_manifest_file_is_read_from_the_controller() -> None:
    """A manifest path must be absolute, exist and hold valid JSON with files."""
    base = {"name": "m", "source": "http", "base_url": "https://mirror/m"}
    assert "absolute path" in problems([{**base, "manifest": "rel/manifest.json"}])[0]
    assert "does not exist" in problems([{**base, "manifest": "/m.json"}], {"/m.json": None})[0]
    assert "not valid JSON" in problems([{**base, "manifest": "/m.json"}], {"/m.json": "{"})[0]
    good = json.dumps({"name": "m", "files": FILES})
    assert problems([{**base, "manifest": "/m.json"}], {"/m.json": good}) == []


def test_controller_dir_must_exist_and_match_its_manifest() -> None:
    """A missing controller_dir and a controller copy that differs from the manifest fail before the host is touched."""
    base = {"name": "c", "source": "controller", "controller_dir": "/srv/c"}
    assert "does not exist on the controller" in problems([base], listings={"/srv/c": None})[0]
    listing = {"/srv/c": [{"path": "config.json", "size": 10, "sha256": SHA_B},
                          {"path": "weights/model.safetensors", "size": 20, "sha256": SHA_B}]}
    [problem] = problems([{**base, "files": FILES}], listings=listing)
    assert problem.startswith("vllm_model_list[name=c].controller_dir: file config.json:")
    assert f"expected sha256 {SHA_A}, actual sha256 {SHA_B}" in problem


# --- controller helpers ---


def test_listings_and_files_from_find() -> None:
    """find results become sorted relative entries; hf metadata, the marker and missing dirs are handled."""
    results = [
        {"item": "/srv/c", "files": [find_file("/srv/c/z.bin", 2, SHA_B), find_file("/srv/c/a.json", 1, SHA_A.upper()),
                                     find_file("/srv/c/.cache/huggingface/x", 1, SHA_A),
                                     find_file("/srv/c/.vllm-fleet-model.json", 1, SHA_A)]},
        {"item": "/srv/gone", "files": [], "skipped_paths": {"/srv/gone": "not a directory"}},
    ]
    assert models.listings(results) == {
        "/srv/c": [{"path": "a.json", "size": 1, "sha256": SHA_A}, {"path": "z.bin", "size": 2, "sha256": SHA_B}],
        "/srv/gone": None,
    }


def test_controller_dirs_and_manifest_paths_deduplicate() -> None:
    """The hashing pass covers each controller directory once across hosts; junk entries are ignored."""
    ctl = {"name": "c", "source": "controller", "controller_dir": "/srv/c/", "manifest": "/m.json"}
    assert models.controller_dirs([[ctl, "junk"], [ctl], "junk"]) == ["/srv/c"]
    assert models.manifest_paths([ctl, ctl, http_model(manifest="/n.json")]) == ["/m.json", "/n.json"]
    assert models.manifest_paths("junk") == []


# --- wanted state and planning ---


def test_wanted_resolves_each_source() -> None:
    """Manifests are normalised, controller listings become manifests and hf with files fetches exactly those."""
    upper = [{**FILES[0], "sha256": SHA_A.upper()}, FILES[1]]
    ctl = {"name": "c", "source": "controller", "controller_dir": "/srv/c", "served_model_name": "C"}
    model_list = [hf_model(), hf_model(name="q2", files=upper), http_model(engine_args={"dtype": "float16"}), ctl]
    wanted = models.wanted(model_list, {}, {"/srv/c": FILES})
    by_name = {m["name"]: m for m in wanted}
    assert by_name["qwen"]["files"] is None and by_name["qwen"]["size"] is None and by_name["qwen"]["include"] == []
    assert by_name["q2"]["files"] == FILES and by_name["q2"]["include"] == ["config.json", "weights/model.safetensors"]
    assert by_name["tiny"]["size"] == 30 and by_name["tiny"]["engine_args"] == {"dtype": "float16"}
    assert by_name["c"]["files"] == FILES and by_name["c"]["served_model_name"] == "C"
    assert models.published(wanted, MODEL_DIR + "/")["c"] == {
        "path": f"{MODEL_DIR}/c", "served_model_name": "C", "engine_args": {}, "source": "controller"}


def _installed(model: dict[str, Any], files: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """find and slurp results of a host where model is installed with files (marker recording model's manifest)."""
    root = f"{MODEL_DIR}/{model['name']}"
    found = [find_file(f"{root}/{f['path']}", f["size"]) for f in files] + [find_file(f"{root}/{models.MARKER}", 5)]
    marker = models.marker(model, model["files"] if model["files"] is not None else FILES)
    return found, [slurped(f"{root}/{models.MARKER}", marker)]


def test_plan_skips_an_installed_model_and_refetches_a_damaged_one() -> None:
    """Same marker and sizes: nothing to do; a missing, truncated or extra file or a changed manifest: fetch."""
    [model] = models.wanted([http_model()], {}, {})
    found, markers = _installed(model, FILES)
    assert models.plan([model], MODEL_DIR, found, markers) == []
    assert models.marker_paths(MODEL_DIR, found) == [f"{MODEL_DIR}/tiny/{models.MARKER}"]
    cases = {
        "not installed": ([], []),
        "file config.json is missing": (found[1:], markers),
        "file config.json has 9 bytes instead of 10": ([{**found[0], "size": 9}] + found[1:], markers),
        "file x is not part of the model": (found + [find_file(f"{MODEL_DIR}/tiny/x", 1)], markers),
    }
    for reason, (files, marks) in cases.items():
        assert models.plan([model], MODEL_DIR, files, marks)[0]["reason"] == reason
    [changed] = models.wanted([http_model(files=[FILES[0], {**FILES[1], "sha256": SHA_A}])], {}, {})
    assert models.plan([changed], MODEL_DIR, found, markers)[0]["reason"] == "the manifest changed"


def test_plan_for_hf_without_manifest_compares_the_origin() -> None:
    """Trust on first use: the recorded files are kept while repo, revision and include stay the same."""
    [model] = models.wanted([hf_model()], {}, {})
    found, markers = _installed(model, FILES)
    assert models.plan([model], MODEL_DIR, found, markers) == []
    [moved] = models.wanted([hf_model(revision="f" * 40)], {}, {})
    assert models.plan([moved], MODEL_DIR, found, markers)[0]["reason"] == "repo, revision or include changed"


# --- verification and messages ---


def _fetched(root: str, files: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """find and looped stat results of a partial directory holding files."""
    found = [find_file(f"{root}/{f['path']}", f["size"]) for f in files]
    stats = [{"item": f["path"], "stat": {"exists": True, "checksum": f["sha256"]}} for f in files]
    return found, stats


def test_verify_accepts_matching_files_and_names_a_mismatch() -> None:
    """All sha256 equal: no message; one differs: host, model, file, expected, actual and the fix."""
    [model] = models.wanted([http_model()], {}, {})
    root = f"{MODEL_DIR}/.partial-tiny"
    assert models.verify(HOST, model, root, *_fetched(root, FILES)) == {"message": "", "files": FILES}
    bad = [FILES[0], {**FILES[1], "sha256": SHA_A}]
    message = models.verify(HOST, model, root, *_fetched(root, bad))["message"]
    assert message.startswith("gpu1: model tiny failed verification: file weights/model.safetensors: ")
    assert f"expected sha256 {SHA_B}, actual sha256 {SHA_A}" in message and "http://mirror/tiny" in message
    extra = models.verify(HOST, model, root, *_fetched(root, FILES + [{"path": "x", "size": 1, "sha256": SHA_A}]))
    assert "file x was fetched but is not in the manifest" in extra["message"]


def test_verify_records_an_hf_download_without_manifest() -> None:
    """Without a manifest the fetched files and their sha256 become the recorded manifest."""
    [model] = models.wanted([hf_model()], {}, {})
    root = f"{MODEL_DIR}/.partial-qwen"
    assert models.verify(HOST, model, root, *_fetched(root, FILES)) == {"message": "", "files": FILES}
    assert "produced no files" in models.verify(HOST, model, root, [], [])["message"]


def test_failure_message_from_a_get_url_checksum_mismatch() -> None:
    """get_url's own checksum failure in a loop becomes the role's file/expected/actual message."""
    [model] = models.wanted([http_model()], {}, {})
    result = {"failed": True, "msg": "One or more items failed", "results": [
        {"item": FILES[0], "failed": False},
        {"item": FILES[1], "failed": True,
         "msg": f"The checksum for /x/.partial-tiny/tmpabc did not match {SHA_B}; it was {SHA_A}."}]}
    message = models.failure(HOST, model, f"{MODEL_DIR}/.partial-tiny", result)
    assert message.startswith("gpu1: model tiny was not installed: file weights/model.safetensors: "
                              f"expected sha256 {SHA_B}, actual sha256 {SHA_A}. Fix: fix the file on the mirror")
    assert message.endswith(f"Removed the partial download {MODEL_DIR}/.partial-tiny; the model installed before, "
                            "if any, is unchanged.")


def test_failure_message_keeps_the_roles_own_messages() -> None:
    """A message the role already wrote (starting with the host) is kept; others get the host and model."""
    [model] = models.wanted([http_model()], {}, {})
    own = models.failure(HOST, model, "/p", {"msg": "gpu1: model tiny failed verification: x. Fix: y."})
    assert own.startswith("gpu1: model tiny failed verification: x. Fix: y. Removed the partial download /p;")
    other = models.failure(HOST, model, "/p", {"msg": "Request failed", "results": [
        {"item": FILES[0], "failed": True, "msg": "Request failed: <urlopen error timed out>"}]})
    assert other.startswith("gpu1: model tiny was not installed: "
                            "file config.json: Request failed: <urlopen error timed out>.")


def test_space_problem_message() -> None:
    """Too little room: the message names host, directory, free and needed GiB and the fix."""
    model = {"name": "qwen", "size": 6 * 1024**3}
    assert models.space_problem(HOST, MODEL_DIR, model, f"Avail\n{100 * 1024**3}\n") == ""
    assert models.space_problem(HOST, MODEL_DIR, model, f"   Avail\n{2 * 1024**3}\n") == (
        "gpu1: vllm_fleet_model_dir (/var/lib/vllm/models) has 2.0 GiB free, model qwen needs 6.6 GiB: "
        "free space or point vllm_fleet_model_dir at a larger disk")


def test_subdirs_lists_parents_first() -> None:
    """Nested manifest paths need their directories created, parents first."""
    assert models.subdirs([{"path": "a/b/c.bin"}, {"path": "a/d.bin"}, {"path": "e.json"}]) == ["a", "a/b"]
