"""vllm_fleet_unpack: a real tar.zst served over HTTP on loopback, checked, then unpacked, or refused with the reason."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, load_as, run_module_main

unpack = load_as("vllm_fleet_unpack", REPO / "plugins" / "modules" / "unpack.py")


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A release-like tree packed as tar.zst, served over HTTP on 127.0.0.1, and an empty destination."""
    tree, www, dest = tmp_path / "tree", tmp_path / "www", tmp_path / "dest"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "python").write_text("#!/bin/true\n")
    (tree / "bin" / "python").chmod(0o755)
    os.utime(tree / "bin" / "python", (1_000_000_000, 1_000_000_000))
    (tree / "lib.so").write_bytes(os.urandom(3 << 20))  # several chunks
    www.mkdir()
    dest.mkdir()
    subprocess.run(["tar", "--create", "--zstd", "--file", str(www / "r.tar.zst"), "--directory", str(tree), "."],
                   check=True)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}/r.tar.zst", "dest": dest, "tree": tree,
               "sha256": hashlib.sha256((www / "r.tar.zst").read_bytes()).hexdigest()}
    finally:
        server.shutdown()


def run(capsys: pytest.CaptureFixture[str], served: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Run the module on the served archive, with argument overrides."""
    args = {"url": served["url"], "checksum": served["sha256"], "dest": str(served["dest"]), **overrides}
    return run_module_main(unpack, args, capsys)


def test_archive_is_unpacked_with_modes_and_times(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Every file arrives byte for byte, the executable bit and the modification time kept."""
    result = run(capsys, served)
    assert result["changed"] is True and result["bytes"] > 0 and "failed" not in result
    python = served["dest"] / "bin" / "python"
    assert python.stat().st_mode & 0o777 == 0o755 and python.stat().st_mtime == 1_000_000_000
    assert (served["dest"] / "lib.so").read_bytes() == (served["tree"] / "lib.so").read_bytes()


def test_other_digest_fails_and_names_both(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """A digest other than the published one fails the task with both digests, before anything is unpacked: the
    destination stays empty and no private directory is left beside it."""
    result = run(capsys, served, checksum="0" * 64)
    assert result["failed"] and served["sha256"] in result["msg"] and "not the published " + "0" * 64 in result["msg"]
    assert not any(served["dest"].iterdir()) and sorted(p.name for p in served["dest"].parent.iterdir()) == [
        "dest", "tree", "www"]


def test_owners_are_not_taken_from_the_archive(served: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    """An archive naming another owner for its files unpacks them as the user who runs the module."""
    archive = tmp_path / "www" / "o.tar.zst"
    subprocess.run(["tar", "--create", "--zstd", "--owner=4242", "--group=4242", "--file", str(archive),
                    "--directory", str(served["tree"]), "."], check=True)
    digest = hashlib.sha256((tmp_path / "www" / "o.tar.zst").read_bytes()).hexdigest()
    assert run(capsys, served, url=served["url"].replace("r.tar.zst", "o.tar.zst"), checksum=digest)["changed"]
    assert {p.stat().st_uid for p in served["dest"].rglob("*")} == {os.getuid()}


def test_a_password_in_the_url_is_never_shown(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """A failure names the URL without its user and password."""
    result = run(capsys, served, url=served["url"].replace("http://", "http://ci:s3cret@") + ".gone")
    assert result["failed"] and "s3cret" not in json.dumps(result) and "http://127.0.0.1:" in result["msg"]


def test_leftovers_of_a_killed_attempt_are_removed(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """A private directory a killed attempt left beside the destination (archive and all) is removed by the next."""
    leftover = served["dest"].parent / ".dest.abc123"
    leftover.mkdir()
    (leftover / "archive").write_bytes(b"x" * 1000)
    assert run(capsys, served)["changed"] and not leftover.exists()


def test_a_destination_with_files_is_refused(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """What an earlier attempt left is the caller's to remove: the module never unpacks over it."""
    (served["dest"] / "left").write_text("x")
    result = run(capsys, served)
    assert result["failed"] and "is not empty" in result["msg"]


def test_missing_archive_fails_with_the_http_error(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """A URL the server does not have fails with its status."""
    result = run(capsys, served, url=served["url"] + ".gone")
    assert result["failed"] and "404" in result["msg"] and "downloading" in result["msg"]


def test_not_an_archive_fails_with_what_tar_said(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """An archive that is not zstd (here: decompressed with gzip) fails with tar's own words."""
    result = run(capsys, served, compress_program="gzip")
    assert result["failed"] and "tar said: " in result["msg"] and "tar said: nothing" not in result["msg"]


@pytest.mark.parametrize("checksum", ["abc", "g" * 64, "sha256:" + "0" * 64])
def test_malformed_checksum_is_refused_before_any_download(served: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                                           checksum: str) -> None:
    """Only 64 hexadecimal digits are a checksum; nothing is written otherwise."""
    result = run(capsys, served, checksum=checksum)
    assert result["failed"] and "64 hexadecimal digits" in result["msg"] and not any(served["dest"].iterdir())


def test_check_mode_downloads_nothing(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Check mode reports the change and leaves the destination empty."""
    assert run(capsys, served, _ansible_check_mode=True)["changed"] is True and not any(served["dest"].iterdir())


def test_copy_hashing_counts_and_hashes_what_it_writes() -> None:
    """The digest and size are those of the concatenated chunks, and the sink receives them all."""
    sink = io.BytesIO()
    assert unpack.copy_hashing([b"ab", b"", b"c"], sink) == (hashlib.sha256(b"abc").hexdigest(), 3)
    assert sink.getvalue() == b"abc"
