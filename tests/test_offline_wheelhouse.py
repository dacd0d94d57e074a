"""Unit tests of tools/offline_wheelhouse.py: freeze parsing, target tags, fake dist-infos, report reading, chunking."""

from __future__ import annotations

import hashlib
import importlib.metadata
import random
import shutil
import subprocess
from pathlib import Path

import offline_wheelhouse as owh
import pytest

FREEZE = """\
# pip list --format=freeze of the image
torch==2.11.0+cu130
Nvidia_Cudnn.CU13==9.19.0.56
numpy == 2.5.2  # trailing comment
-e git+https://example.invalid/repo.git#egg=thing
vllm-tools @ file:///opt/wheels/vllm_tools-1.0-py3-none-any.whl
not a requirement line

"""


def wheel(name: str, version: str, digest: str = "0" * 64) -> owh.Wheel:
    """A Wheel with a pure-Python file name."""
    return owh.Wheel(name, version, f"{name.replace('-', '_')}-{version}-py3-none-any.whl", digest)


def test_parse_freeze_keeps_pinned_lines_by_canonical_name() -> None:
    """Only name==version lines count; keys are canonical, names and local versions stay as written."""
    provided = owh.parse_freeze(FREEZE)
    assert provided == {
        "torch": owh.Dist("torch", "2.11.0+cu130"),
        "nvidia-cudnn-cu13": owh.Dist("Nvidia_Cudnn.CU13", "9.19.0.56"),
        "numpy": owh.Dist("numpy", "2.5.2"),
    }


def test_unpinned_lines_finds_direct_url_installs() -> None:
    """A `name @ url` line is reported, since the provided set silently lacks that distribution."""
    assert owh.unpinned_lines(FREEZE) == ["vllm-tools @ file:///opt/wheels/vllm_tools-1.0-py3-none-any.whl"]


def test_manylinux_platforms_lists_every_tag_down_to_glibc_2_5() -> None:
    """pip matches --platform exactly, so every older manylinux tag and the legacy aliases are listed."""
    tags = owh.manylinux_platforms("2.35")
    assert tags[:2] == ["manylinux_2_35_x86_64", "manylinux_2_34_x86_64"]
    assert "manylinux_2_5_x86_64" in tags and "manylinux_2_36_x86_64" not in tags
    assert tags[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert len(tags) == 31 + 3
    assert "manylinux2014_x86_64" not in owh.manylinux_platforms("2.12")


def test_manylinux_platforms_refuses_impossible_glibc() -> None:
    """No manylinux tag exists below glibc 2.5."""
    with pytest.raises(ValueError, match="2.4"):
        owh.manylinux_platforms("2.4")


def test_target_options_name_python_implementation_and_each_platform() -> None:
    """Binary-only, the target's version and CPython, then one --platform per tag."""
    assert owh.target_options("3.12", ["a", "b"]) == [
        "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--platform", "a", "--platform", "b",
    ]


def test_fake_dist_info_is_an_installed_distribution(tmp_path: Path) -> None:
    """importlib.metadata, which pip reads installed distributions with, sees the fake's name and version."""
    directory, files = owh.dist_info(owh.Dist("nvidia-cudnn-cu13", "9.19.0.56"))
    assert directory == "nvidia_cudnn_cu13-9.19.0.56.dist-info"
    (tmp_path / directory).mkdir()
    for name, text in files.items():
        (tmp_path / directory / name).write_text(text)
    [dist] = importlib.metadata.distributions(path=[str(tmp_path)])
    assert (dist.metadata["Name"], dist.version, dist.requires) == ("nvidia-cudnn-cu13", "9.19.0.56", None)


def test_wheels_from_report_reads_name_version_file_and_hash() -> None:
    """The file name comes unquoted from the URL; the hash from `hashes` or the legacy `hash` field."""
    report = {"install": [
        {"metadata": {"name": "vllm", "version": "0.26.0"},
         "download_info": {"url": "https://files.example.invalid/a/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                           "archive_info": {"hashes": {"sha256": "ab" * 32}}}},
        {"metadata": {"name": "Apache-TVM-FFI", "version": "0.1.10+local"},
         "download_info": {"url": "file:///w/apache_tvm_ffi-0.1.10%2Blocal-py3-none-any.whl",
                           "archive_info": {"hash": "sha256=" + "cd" * 32}}},
    ]}
    assert owh.wheels_from_report(report) == [
        owh.Wheel("Apache-TVM-FFI", "0.1.10+local", "apache_tvm_ffi-0.1.10+local-py3-none-any.whl", "cd" * 32),
        owh.Wheel("vllm", "0.26.0", "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl", "ab" * 32),
    ]


def test_wheels_from_report_refuses_sdists_and_missing_hashes() -> None:
    """Only hashed wheels can go into a wheelhouse that is checked by SHA256SUMS."""
    sdist = {"metadata": {"name": "x", "version": "1"},
             "download_info": {"url": "https://e.invalid/x-1.tar.gz", "archive_info": {"hashes": {"sha256": "0"}}}}
    with pytest.raises(ValueError, match="not a wheel"):
        owh.wheels_from_report({"install": [sdist]})
    unhashed = {"metadata": {"name": "x", "version": "1"}, "download_info": {"url": "https://e.invalid/x-1-py3-none-any.whl"}}
    with pytest.raises(ValueError, match="no sha256"):
        owh.wheels_from_report({"install": [unhashed]})


def test_skipped_dists_and_replacements() -> None:
    """Skips match by canonical name with the resolved version; replacements name both versions."""
    wheels = [wheel("tilelang", "0.1.9"), wheel("z3-solver", "4.15.4.0"), wheel("numpy", "2.3.5"), wheel("vllm", "0.26.0")]
    assert owh.skipped_dists(wheels, ["TileLang", "z3_solver", "absent"]) == {
        "tilelang": owh.Dist("tilelang", "0.1.9"), "z3-solver": owh.Dist("z3-solver", "4.15.4.0"),
    }
    assert owh.replacements(wheels, owh.parse_freeze("numpy==2.5.2\ntorch==2.11.0\n")) == ["numpy 2.5.2 -> 2.3.5"]


def test_lock_and_sums_text() -> None:
    """The lock pins each wheel with its hash; SHA256SUMS is sorted in sha256sum's two-space format."""
    assert owh.lock_text([wheel("a", "1", "f" * 64)]) == f"a==1 --hash=sha256:{'f' * 64}\n"
    assert owh.sums_text({"b.whl": "2" * 64, "a.whl": "1" * 64}) == f"{'1' * 64}  a.whl\n{'2' * 64}  b.whl\n"


def test_isolated_env_drops_all_pip_settings() -> None:
    """No PIP_* variable and no configuration file can bring an index or a find-links folder into the check."""
    env = owh.isolated_env({"PATH": "/bin", "PIP_FIND_LINKS": "/opt/wheels", "PIP_INDEX_URL": "x"})
    assert env == {"PATH": "/bin", "PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def test_split_pieces_cuts_only_files_over_the_cap() -> None:
    """A file of cap bytes stays whole; a bigger one becomes contiguous parts of cap bytes, the last shorter."""
    pieces = owh.split_pieces({"big.whl": 250, "exact.whl": 100, "small.whl": 1}, 100)
    assert pieces == [
        owh.Piece("big.whl", "big.whl.part-00", 0, 100),
        owh.Piece("big.whl", "big.whl.part-01", 100, 100),
        owh.Piece("big.whl", "big.whl.part-02", 200, 50),
        owh.Piece("exact.whl", "exact.whl", 0, 100),
        owh.Piece("small.whl", "small.whl", 0, 1),
    ]


def test_pack_keeps_every_chunk_under_the_cap_and_room_in_chunk_0() -> None:
    """First-fit decreasing fills gaps with small pieces and never lets chunk 0 crowd out its reserved bytes."""
    rng = random.Random(7)
    sizes = {f"w{i}.whl": rng.randint(1, 400) for i in range(60)} | {"huge.whl": 2000}
    pieces = owh.split_pieces(sizes, 300)
    chunks = owh.pack(pieces, 300, reserved=120)
    totals = [sum(p.size for p in chunk) for chunk in chunks]
    assert totals[0] + 120 <= 300 and max(totals) <= 300
    placed = [p for chunk in chunks for p in chunk]
    assert len(placed) == len(pieces) and set(placed) == set(pieces)
    assert len(chunks) <= sum(sizes.values()) // 300 + 3


def test_pack_refuses_a_reserve_over_the_cap() -> None:
    """A script bigger than a chunk cannot be carried at all."""
    with pytest.raises(ValueError, match="exceeds the cap"):
        owh.pack([], 10, reserved=11)


def write_wheelhouse(out: Path, sizes: dict[str, int]) -> dict[str, bytes]:
    """Random files of these sizes plus SHA256SUMS in out; returns the contents by name."""
    rng = random.Random(1)
    contents = {name: rng.randbytes(size) for name, size in sizes.items()}
    for name, data in contents.items():
        (out / name).write_bytes(data)
    sums = owh.sums_text({name: hashlib.sha256(data).hexdigest() for name, data in contents.items()})
    (out / owh.SUMS).write_text(sums)
    return contents | {owh.SUMS: sums.encode()}


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils' sha256sum")
def test_chunks_reassemble_to_the_same_files(tmp_path: Path) -> None:
    """The script in chunk-00 rebuilds every file byte for byte, each chunk with the script stays under the cap."""
    out, dest = tmp_path / "out", tmp_path / "dest"
    out.mkdir()
    contents = write_wheelhouse(out, {"vllm-0.26.0-py3-none-any.whl": 5000, "a-1-py3-none-any.whl": 700,
                                      "b-1-py3-none-any.whl": 1024, "c-1-py3-none-any.whl": 3})
    cap = 2048
    chunks, script = owh.plan_chunks({name: len(data) for name, data in contents.items()}, cap)
    owh.write_chunks(out, chunks, script)
    for index in range(len(chunks)):
        assert sum(f.stat().st_size for f in (out / owh.chunk_name(index)).iterdir()) <= cap
    subprocess.run(["sh", out / "chunk-00" / owh.SCRIPT, dest], check=True, capture_output=True)
    assert {f.name: f.read_bytes() for f in dest.iterdir()} == contents


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils' sha256sum")
def test_reassembling_in_place_leaves_linked_chunks_intact(tmp_path: Path) -> None:
    """By default the script writes beside the chunks, where the wheels are hard links of the chunks' whole files."""
    contents = write_wheelhouse(tmp_path, {"a-1-py3-none-any.whl": 100, "big-1-py3-none-any.whl": 900})
    chunks, script = owh.plan_chunks({name: len(data) for name, data in contents.items()}, 1024)
    owh.write_chunks(tmp_path, chunks, script)
    subprocess.run(["sh", tmp_path / "chunk-00" / owh.SCRIPT], check=True, capture_output=True)
    subprocess.run(["sh", tmp_path / "chunk-00" / owh.SCRIPT], check=True, capture_output=True)
    assert all((tmp_path / name).read_bytes() == data for name, data in contents.items())
    assert not (tmp_path / ".partial").exists()


def test_clear_stale_removes_old_chunks_and_wheels_only(tmp_path: Path) -> None:
    """A re-run keeps the wheels it will reuse and its other files, and drops the rest."""
    for name in ("keep-1-py3-none-any.whl", "old-1-py3-none-any.whl", "notes.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "chunk-03").mkdir()
    (tmp_path / "chunk-03" / "x").write_text("x")
    owh.clear_stale(tmp_path, ["keep-1-py3-none-any.whl"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep-1-py3-none-any.whl", "notes.txt"]
