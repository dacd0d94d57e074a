"""Fleet compile cache: keys, plans, and real zstd bundles packed, seeded, refused and published."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pwd
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, load_as, run_module_main

from ansible_collections.vllm.fleet.plugins.plugin_utils import compile_cache as cc

bundles = load_as("ansible.module_utils.vllm_fleet_compile_cache",
                  REPO / "plugins" / "module_utils" / "vllm_fleet_compile_cache.py")
module = load_as("ansible.modules.vllm_fleet_compile_cache", REPO / "plugins" / "modules" / "compile_cache.py")

PARTS = cc.cache_parts("cpu")
EXACT_NS = 1_733_000_000_123_456_789  # a time a float of seconds cannot hold
ZSTD = "zstd -1 -T0"
SCENE = {"name": "realtime", "model_path": "/var/lib/vllm/models/tiny", "gpus": [0], "env": {},
         "engine_args": {"max-model-len": 4096, "max-num-seqs": 16, "gpu-memory-utilization": 0.9, "dtype": "bfloat16"}}
MARKER = {"files": [{"path": "model.safetensors", "size": 10, "sha256": "ab" * 32}], "origin": {"base_url": "http://a"}}
PROBE = {"cpu_flags": "flags\t\t: fpu sse4_2 avx avx2 fma hypervisor", "models": {SCENE["model_path"]: MARKER},
         "recorded": {}, "compiled": {}}
OS = "Debian 12 x86_64"


def bundle_of(scene: dict[str, Any] = SCENE, probe: dict[str, Any] = PROBE, release: str = "cpu-0.32.0-4b91f094",
              env: dict[str, Any] | None = None, flavour: str = "cpu", gpus: dict[str, Any] | None = None,
              os_release: str = OS) -> dict[str, Any]:
    """Return the one bundle entry the kit computes for a scene."""
    return cc.scene_bundles([scene], release, flavour, gpus, probe, os_release, "/var/lib/vllm/cache", env or {})[0]


def test_bundle_name_ignores_what_compiles_nothing() -> None:
    """Port, memory share, core binding and the lab's model URL leave the bundle alone: hosts alike share it."""
    base = bundle_of()
    other_host = bundle_of({**SCENE, "engine_args": {**SCENE["engine_args"], "gpu-memory-utilization": 0.5}},
                           {**PROBE, "models": {SCENE["model_path"]: {**MARKER, "origin": {"base_url": "http://b"}}},
                            "cpu_flags": PROBE["cpu_flags"] + " ht"},
                           env={"VLLM_CPU_OMP_THREADS_BIND": "1"})
    assert base["name"] == other_host["name"] and base["name"].startswith("realtime-") and len(base["name"]) == 25


@pytest.mark.parametrize("change", [
    {"release": "cpu-0.32.0-deadbeef"},
    {"os_release": "Ubuntu 24.04 x86_64"},
    {"probe": {**PROBE, "cpu_flags": "flags : sse4_2 avx avx2 fma avx512f"}},
    {"probe": {**PROBE, "models": {SCENE["model_path"]: {"files": [{"path": "x", "size": 1, "sha256": "cd" * 32}]}}}},
    {"scene": {**SCENE, "engine_args": {**SCENE["engine_args"], "max-num-seqs": 8}}},
    {"scene": {**SCENE, "name": "batch"}},
    {"env": {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}},
])
def test_bundle_name_follows_what_decides_validity(change: dict[str, Any]) -> None:
    """Release, OS, CPU ISA, model files, compile-relevant arguments, scene (its cache path) and env each make a new
    bundle."""
    assert bundle_of(**change)["name"] != bundle_of()["name"]


def test_cuda_platform_is_the_cards_and_driver_branch() -> None:
    """On cuda the scene's cards (profile, compute capability) and the driver branch decide; other cards do not."""
    def gpus(cc: str, branch: int) -> dict[str, Any]:
        return {"driver_branch": branch, "gpus": [{"index": 0, "name": "RTX 4090", "profile": "rtx4090",
                                                   "compute_capability": cc}, {"index": 1, "name": "RTX 3090",
                                                                               "profile": "rtx3090",
                                                                               "compute_capability": "8.6"}]}
    base = bundle_of(flavour="cuda", gpus=gpus("8.9", 580))
    assert base["key"]["platform"]["gpus"] == [{"name": "RTX 4090", "profile": "rtx4090", "compute_capability": "8.9"}]
    assert bundle_of(flavour="cuda", gpus=gpus("8.9", 590))["name"] != base["name"]
    assert bundle_of({**SCENE, "gpus": [1]}, flavour="cuda", gpus=gpus("8.9", 580))["name"] != base["name"]


def test_cuda_without_complete_gpu_facts_shares_nothing() -> None:
    """A cuda host whose GPU facts lack the card's name or compute capability, or the driver branch, gets no bundle:
    any GPU's bundle would match it."""
    assert not bundle_of(flavour="cuda", gpus=None)["name"]
    assert not bundle_of(flavour="cuda", gpus={"driver_branch": 580, "gpus": [{"index": 0, "name": "RTX 4090"}]})["name"]
    assert not bundle_of(flavour="cuda", gpus={"gpus": [{"index": 0, "name": "x", "compute_capability": "8.9"}]})["name"]


def test_env_values_stay_out_of_the_key() -> None:
    """A secret in a scene's env reaches the key only as a digest (keys are written to the controller's store)."""
    key = bundle_of(env={"HF_TOKEN": "hf_secret_value"})["key"]
    assert "hf_secret_value" not in json.dumps(key)


def test_presence_needs_record_and_compiled_cache() -> None:
    """A cache counts as holding its bundle only when it records that name and its compile cache is not empty."""
    name = bundle_of()["name"]
    assert not bundle_of(probe={**PROBE, "recorded": {"realtime": name}})["present"]
    assert bundle_of(probe={**PROBE, "recorded": {"realtime": name}, "compiled": {"realtime": True}})["present"]
    assert not bundle_of(probe={**PROBE, "models": {}})["name"]  # no installed model: nothing to key on


def test_seedable_unpublished_and_packers() -> None:
    """Seed what the store has and the cache lacks; pack what the store lacks, each bundle by the first host only."""
    entry = bundle_of()
    published = {entry["name"]: {"name": entry["name"], "archive": "a", "sha256": "0" * 64}}
    assert [b["published"]["archive"] for b in cc.seedable([entry], published)] == ["a"]
    assert cc.seedable([{**entry, "present": True}], published) == []
    assert cc.unpublished([entry], published, []) == []
    assert cc.unpublished([entry], published, [entry["name"]]) == [entry["name"]]
    assert cc.unpublished([entry], {}, []) == [entry["name"]]
    assert cc.unpublished([{**entry, "present": True}], {}, []) == []  # held before: a pruned bundle stays pruned
    assert cc.packers({"h1": ["a", "b"], "h2": ["b", "c"], "h3": []}) == {"h1": ["a", "b"], "h2": ["c"], "h3": []}


def test_index_entries_skip_broken_files() -> None:
    """Index files that do not parse or name no bundle are left out, whatever their file names."""
    assert cc.index_entries(['{"name": "x-1", "sha256": "0"}', "{broken", "[]", '{"name": 3}']) == {
        "x-1": {"name": "x-1", "sha256": "0"}}


# Real bundles from here on.

def tree_digest(root: Path) -> dict[str, tuple[int, str]]:
    """Return every path under root with its mode and content digest (directories: mode only)."""
    out = {}
    for path in sorted(root.rglob("*")):
        data = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out[str(path.relative_to(root))] = (path.stat().st_mode, data)
    return out


@pytest.fixture()
def compiled(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A scene cache as a first start leaves it, packed into a bundle, and an empty cache of a second host."""
    first = tmp_path / "host1" / "realtime"
    for relative, data in (("vllm/torch_compile_cache/abc/rank_0_0/backbone/graph.py", b"graph"),
                           ("vllm/modelinfos/qwen2.json", b"{}"),
                           ("inductor/fxgraph/xy/entry", os.urandom(1 << 20)), ("inductor/kernel.so", b"\x7fELF"),
                           ("precompiled_headers/c.gch", b"header"), ("huggingface/token", b"host-only")):
        (first / relative).parent.mkdir(parents=True, exist_ok=True)
        (first / relative).write_bytes(data)
    (first / "inductor/kernel.so").chmod(0o755)
    os.utime(first / "inductor/kernel.so", ns=(EXACT_NS, EXACT_NS))
    entry = bundle_of()
    archive = tmp_path / "bundle.tar.zst"
    bundles.pack(str(first), PARTS, entry["name"], entry["key"], str(archive), ZSTD)
    second = tmp_path / "host2" / "realtime"
    second.mkdir(parents=True)
    yield {"first": first, "second": second, "archive": archive, "entry": entry,
           "sha256": bundles.sha256_file(str(archive)), "tmp": tmp_path}


def seed(ctx: dict[str, Any], archive: Path | None = None, checksum: str | None = None,
         key: dict[str, Any] | None = None, cache: Path | None = None) -> list[str]:
    """Seed the second host's cache (or cache) from the fixture's bundle, or from another archive."""
    return bundles.seed(str(archive or ctx["archive"]), checksum or ctx["sha256"], str(cache or ctx["second"]),
                        ctx["entry"]["name"], key or ctx["entry"]["key"], PARTS, ZSTD, os.getuid(), os.getgid())


def test_seed_gives_the_second_host_the_first_hosts_artefacts(compiled: dict[str, Any]) -> None:
    """The second cache gets every compiled part (modes and contents), not the host's hub cache, and the record."""
    moved = seed(compiled)
    assert sorted(moved) == ["inductor", "precompiled_headers", "vllm"]
    contents = {path: data for path, (_, data) in tree_digest(compiled["first"] / "vllm").items()}
    assert {path: data for path, (_, data) in tree_digest(compiled["second"] / "vllm").items()} == contents
    assert all(not mode & 0o7027 for path, (mode, _) in tree_digest(compiled["second"]).items() if path != bundles.RECORD)
    assert (compiled["second"] / "inductor/fxgraph/xy/entry").read_bytes() == (
        compiled["first"] / "inductor/fxgraph/xy/entry").read_bytes()
    assert os.access(compiled["second"] / "inductor/kernel.so", os.X_OK)
    assert not (compiled["second"] / "huggingface").exists()
    assert bundles.read_record(str(compiled["second"])) == compiled["entry"]["name"]
    assert not list(compiled["second"].parent.glob(".staging-*"))


def test_seeded_files_keep_their_exact_times(compiled: dict[str, Any]) -> None:
    """Each file keeps its modification time to the nanosecond: ninja rebuilds an object whose time moved at all."""
    seed(compiled)
    assert (compiled["second"] / "inductor/kernel.so").stat().st_mtime_ns == EXACT_NS
    for relative in ("vllm/modelinfos/qwen2.json", "vllm/torch_compile_cache/abc/rank_0_0/backbone/graph.py"):
        assert (compiled["second"] / relative).stat().st_mtime_ns == (compiled["first"] / relative).stat().st_mtime_ns


def test_seed_keeps_what_the_cache_already_has(compiled: dict[str, Any]) -> None:
    """Entries the cache holds keep the host's own version; only what it lacks moves in."""
    own = compiled["second"] / "inductor" / "kernel.so"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"mine")
    seed(compiled)
    assert own.read_bytes() == b"mine"
    assert (compiled["second"] / "inductor/fxgraph/xy/entry").exists()


def refused(ctx: dict[str, Any], message: str, **kwargs: Any) -> None:
    """Seeding must raise BundleError with message, leave the cache as it was and remove its staging."""
    cache = kwargs.get("cache") or ctx["second"]
    before = tree_digest(cache)
    with pytest.raises(bundles.BundleError, match=message):
        seed(ctx, **kwargs)
    assert tree_digest(cache) == before
    assert bundles.read_record(str(cache)) == ""
    assert not list(cache.parent.glob(".staging-*"))


def test_refuses_a_bundle_whose_digest_differs(compiled: dict[str, Any]) -> None:
    """A bundle whose SHA-256 is not the published one is never unpacked."""
    refused(compiled, "not the published", checksum="0" * 64)


def test_refuses_a_bundle_built_for_another_platform_or_release(compiled: dict[str, Any]) -> None:
    """A bundle under this name whose manifest carries another key (another release here) is refused."""
    other = {**compiled["entry"]["key"], "release": "cpu-0.31.0-00000000"}
    bundles.pack(str(compiled["first"]), PARTS, compiled["entry"]["name"], other, str(compiled["archive"]), ZSTD)
    refused(compiled, "built for another release", checksum=bundles.sha256_file(str(compiled["archive"])))


def test_refuses_a_truncated_archive(compiled: dict[str, Any]) -> None:
    """An archive cut short (published with the cut copy's own digest) fails in the middle and leaves nothing."""
    data = compiled["archive"].read_bytes()
    compiled["archive"].write_bytes(data[: len(data) * 2 // 3])
    refused(compiled, "damaged", checksum=bundles.sha256_file(str(compiled["archive"])))


def tar_zst(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    """Write members into a zstd tar at path; return its SHA-256."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(subprocess.run(["zstd", "-c"], input=raw.getvalue(), capture_output=True, check=True).stdout)
    return bundles.sha256_file(str(path))


@pytest.mark.parametrize(("member", "message"), [
    ("../../escape", "points outside"), ("/etc/evil", "points outside"), ("huggingface/token", "not part of"),
    ("inductor/link", "neither a file"), ("vllm", "not part of"), ("inductor/hard", "neither a file"),
])
def test_refuses_members_that_could_land_elsewhere(compiled: dict[str, Any], member: str, message: str) -> None:
    """Paths out of the cache, absolute paths, parts no bundle carries and links are refused before anything moves."""
    manifest = json.dumps({"name": compiled["entry"]["name"], "key": compiled["entry"]["key"]}).encode()
    info = tarfile.TarInfo(member)
    if member.endswith("link"):
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
    if member.endswith("hard"):
        info.type, info.linkname = tarfile.LNKTYPE, "/etc/shadow"
    archive = compiled["tmp"] / "evil.tar.zst"
    checksum = tar_zst(archive, [(tarfile.TarInfo(bundles.MANIFEST), manifest), (info, b"x")])
    refused(compiled, message, archive=archive, checksum=checksum)
    assert not (compiled["tmp"] / "escape").exists()


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs for a scene cache (root only), unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=False).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_refuses_a_bundle_that_fills_the_disk(compiled: dict[str, Any], small_disk: Path) -> None:
    """A full disk while unpacking leaves the scene's existing cache as it was and no staging behind."""
    cache = small_disk / "realtime"
    (cache / "inductor").mkdir(parents=True)
    (cache / "inductor" / "own").write_bytes(b"kept")
    refused(compiled, "No space left", cache=cache)


def test_module_seed_warns_instead_of_failing(compiled: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The module turns a refused bundle into a warning naming it, so the scene starts and compiles for itself."""
    args = {"state": "seed", "archive": str(compiled["archive"]), "checksum": "1" * 64,
            "cache_dir": str(compiled["second"]), "name": compiled["entry"]["name"], "key": compiled["entry"]["key"],
            "parts": PARTS, "owner": "root", "group": "root"}
    result = run_module_main(module, args, capsys)
    assert not result["changed"] and not result["seeded"] and "failed" not in result
    warnings = json.dumps(result["warnings"])  # ansible-core 2.19 returns them as structured events
    assert compiled["entry"]["name"] in warnings and "compiles for itself" in warnings
    assert run_module_main(module, {**args, "checksum": compiled["sha256"]}, capsys)["seeded"]


def test_module_probe_reads_markers_records_and_compiled(compiled: dict[str, Any],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """probe returns the CPU flags line, each model's marker (None when absent) and each scene's record."""
    model = compiled["tmp"] / "model"
    model.mkdir()
    (model / ".vllm-fleet-model.json").write_text(json.dumps(MARKER))
    bundles.write_record(str(compiled["first"]), "realtime-0123456789abcdef")
    result = run_module_main(module, {"state": "probe", "cache_dir": str(compiled["first"].parent),
                                      "scenes": ["realtime", "batch"], "model_paths": [str(model), "/nonexistent"],
                                      "parts": PARTS}, capsys)
    assert result["models"] == {str(model): {"files": MARKER["files"]}, "/nonexistent": None}  # no origin URL
    assert result["recorded"] == {"realtime": "realtime-0123456789abcdef", "batch": ""}
    assert result["compiled"] == {"realtime": True, "batch": False}
    assert result["cpu_flags"].split(":")[0].strip() in ("flags", "Features") and result["compressor"]
    missing = run_module_main(module, {"state": "probe", "cache_dir": str(compiled["first"].parent),
                                       "compress_program": "no-such-zstd -1"}, capsys)
    assert not missing["compressor"] and "no-such-zstd is not installed" in json.dumps(missing["warnings"])


def test_publish_indexes_last_and_prunes_per_scene(compiled: dict[str, Any]) -> None:
    """publish stores the bundle under its digest with its index entry, replaces an older copy of the same name and
    keeps the newest `keep` bundles of each scene."""
    store = compiled["tmp"] / "store"
    store.mkdir()
    key = compiled["entry"]["key"]
    names = []
    for n in range(3):
        incoming = compiled["tmp"] / f"in{n}"
        incoming.write_bytes(compiled["archive"].read_bytes() + bytes([n]))
        names.append(f"realtime-{n:016x}")
        result = bundles.publish(str(incoming), str(store), names[-1], {**key, "n": n}, 2)
    assert result["pruned"] == [names[0]]
    other_platform = compiled["tmp"] / "other"
    other_platform.write_bytes(b"another platform's bundle")
    bundles.publish(str(other_platform), str(store), "realtime-ffffffffffffffff",
                    {**key, "platform": {"flavour": "cpu", "os": "Ubuntu 24 x86_64", "cpu_isa": []}}, 2)
    assert "realtime-ffffffffffffffff" in bundles.index(str(store))  # kept: pruning is per platform and release
    assert sorted(bundles.index(str(store))) == [*names[1:], "realtime-ffffffffffffffff"]
    entry = bundles.index(str(store))[names[2]]
    assert bundles.sha256_file(str(store / entry["archive"])) == entry["sha256"] == result["sha256"]
    again = compiled["tmp"] / "again"
    again.write_bytes(b"other content")
    bundles.publish(str(again), str(store), names[2], key, 2)
    assert sorted(p.name for p in store.glob("*.tar.zst")) == sorted(
        e["archive"] for e in bundles.index(str(store)).values())


def test_setuid_members_lose_their_bits(compiled: dict[str, Any]) -> None:
    """A member packed setuid (or world-writable) lands 0750 at most."""
    manifest = json.dumps({"name": compiled["entry"]["name"], "key": compiled["entry"]["key"]}).encode()
    info = tarfile.TarInfo("inductor/kernel.so")
    info.mode = 0o6777
    archive = compiled["tmp"] / "suid.tar.zst"
    checksum = tar_zst(archive, [(tarfile.TarInfo(bundles.MANIFEST), manifest), (info, b"x")])
    seed(compiled, archive=archive, checksum=checksum)
    assert (compiled["second"] / "inductor/kernel.so").stat().st_mode & 0o7777 == 0o750


def test_links_in_the_cache_are_never_followed(compiled: dict[str, Any], tmp_path: Path) -> None:
    """The service user owns its cache: a record that is a link reads as none and is replaced, not written through;
    a part that is a link (or under one) is not packed."""
    secret = tmp_path / "secret"
    secret.write_text("realtime-0123456789abcdef\n")
    secret.chmod(0o600)
    (compiled["first"] / bundles.RECORD).symlink_to(secret)
    assert bundles.read_record(str(compiled["first"])) == ""
    bundles.write_record(str(compiled["first"]), "realtime-fedcba9876543210")
    assert secret.read_text() == "realtime-0123456789abcdef\n" and secret.stat().st_mode & 0o777 == 0o600
    elsewhere = tmp_path / "elsewhere" / "cache"
    elsewhere.mkdir(parents=True)
    (elsewhere / "host-file").write_text("not the cache's")
    (compiled["first"] / "humming").symlink_to(elsewhere.parent)
    assert "humming/cache" not in bundles.present_parts(str(compiled["first"]), cc.cache_parts("cuda"))
    assert "inductor" in bundles.present_parts(str(compiled["first"]), cc.cache_parts("cuda"))


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_seed_unpacks_as_the_scenes_own_user(compiled: dict[str, Any]) -> None:
    """Run as root for another user, the unpacking runs as that user alone: every file it made is the user's, a
    bundle refused in that process is refused with its reason, and the root-owned staging is gone either way."""
    nobody = pwd.getpwnam("nobody")
    # Outside pytest's root-only directories: the user passes through to its cache; the directory stays root's.
    base = Path(tempfile.mkdtemp(prefix="vllm-fleet-seed-"))
    try:
        base.chmod(0o755)
        caches = {scene: base / scene for scene in ("realtime", "batch")}
        for cache in caches.values():
            cache.mkdir(mode=0o700)
            os.chown(cache, nobody.pw_uid, nobody.pw_gid)
        moved = bundles.seed(str(compiled["archive"]), compiled["sha256"], str(caches["realtime"]),
                             compiled["entry"]["name"], compiled["entry"]["key"], PARTS, ZSTD, nobody.pw_uid,
                             nobody.pw_gid)
        assert sorted(moved) == ["inductor", "precompiled_headers", "vllm"]
        assert {path.stat().st_uid for path in caches["realtime"].rglob("*")} == {nobody.pw_uid}
        with pytest.raises(bundles.BundleError, match="another release, platform, model or scene configuration"):
            bundles.seed(str(compiled["archive"]), compiled["sha256"], str(caches["batch"]), compiled["entry"]["name"],
                         {**compiled["entry"]["key"], "scene": "batch"}, PARTS, ZSTD, nobody.pw_uid, nobody.pw_gid)
        assert list(caches["batch"].iterdir()) == [] and not list(base.glob(".staging-*"))
    finally:
        shutil.rmtree(base)
