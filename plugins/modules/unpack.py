#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: download a compressed tar archive into a private directory, check its SHA-256, then unpack it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: unpack
short_description: Download a compressed tar archive, check its SHA-256, then unpack it
description:
  - Downloads the archive at I(url) into a new root-only (0700) directory beside I(dest), hashing it as it arrives.
    Only an archive whose digest is I(checksum) is unpacked, with C(tar --no-same-owner) inside that directory; the
    tree then replaces the empty I(dest) in one rename, and the archive is deleted.
  - Fails when the download fails, the digest is not I(checksum) (nothing is unpacked) or tar fails; I(dest) is then
    left as it was and the private directory is removed.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  url:
    description: HTTP(S) URL of the archive; a user and password in it are never shown.
    type: str
    required: true
  checksum:
    description: The archive's SHA-256, as 64 hexadecimal digits.
    type: str
    required: true
  dest:
    description: Empty (or absent) directory the tree becomes; tar keeps the archive's modes and times, not its owners.
    type: path
    required: true
  compress_program:
    description: What tar decompresses with (C(--use-compress-program)); it is called with C(-d).
    type: str
    default: zstd
  timeout:
    description: Seconds to wait for the server to connect or send more data.
    type: int
    default: 60
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Download and unpack the packed release
  vllm.fleet.unpack:
    url: http://10.0.0.1/wheels/releases/cpu-0.32.0-4b91f094-05c3e6a7.tar.zst
    checksum: "{{ lookup('ansible.builtin.file', bundles_dir ~ '/cpu-0.32.0-4b91f094-05c3e6a7.tar.zst.sha256') }}"
    dest: /opt/vllm/releases/cpu-0.32.0-4b91f094
"""

RETURN = r"""
bytes:
  description: Size of the archive that was streamed.
  returned: changed
  type: int
"""

import hashlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import urllib.parse  # noqa: E402
from collections.abc import Iterable, Iterator  # noqa: E402
from typing import IO, Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.urls import open_url  # noqa: E402

CHUNK = 1 << 20


def copy_hashing(chunks: Iterable[bytes], sink: IO[bytes]) -> tuple[str, int]:
    """Write every chunk to sink; return the SHA-256 hex digest and the size of what went through."""
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        sink.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def read_chunks(stream: Any) -> Iterator[bytes]:
    """Yield a response body in chunks of CHUNK bytes until it ends."""
    while chunk := stream.read(CHUNK):
        yield chunk


def without_credentials(url: str) -> str:
    """Return url without a user or password, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def remove_leftovers(dest: str) -> None:
    """Remove the private directories a killed earlier attempt left beside dest (they may hold a whole archive)."""
    parent, prefix = os.path.dirname(dest), f".{os.path.basename(dest)}."
    for name in os.listdir(parent) if os.path.isdir(parent) else []:
        if name.startswith(prefix):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def download(url: str, archive: str, timeout: int) -> tuple[str, int]:
    """Write url's body to a new file archive (0600); return its SHA-256 and size."""
    with open_url(url, timeout=timeout) as response, open(archive, "xb") as sink:
        return copy_hashing(read_chunks(response), sink)


def unpack(archive: str, tree: str, compress_program: str) -> str:
    """Extract archive into the new directory tree as the caller's user; return tar's complaint ('' on success)."""
    os.mkdir(tree, 0o700)
    done = subprocess.run(["tar", "--extract", "--no-same-owner", f"--use-compress-program={compress_program}",
                           "--directory", tree, "--file", archive], capture_output=True, check=False)
    return "" if done.returncode == 0 else done.stderr.decode(errors="replace").strip()[-1000:] or "nothing"


def main() -> None:
    """Download url privately, check its digest, unpack it and put the tree at dest; fail with the reason otherwise."""
    module = AnsibleModule(argument_spec={
        "url": {"type": "str", "required": True, "no_log": True}, "checksum": {"type": "str", "required": True},
        "dest": {"type": "path", "required": True}, "compress_program": {"type": "str", "default": "zstd"},
        "timeout": {"type": "int", "default": 60}}, supports_check_mode=True)
    url, expected, dest = module.params["url"], module.params["checksum"].strip().lower(), module.params["dest"]
    shown = without_credentials(url)
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        module.fail_json(msg=f"checksum must be a SHA-256 of 64 hexadecimal digits, not {expected!r}")
    if os.path.isdir(dest) and os.listdir(dest):
        module.fail_json(msg=f"{dest} is not empty: the caller removes what an earlier attempt left")
    if module.check_mode:
        module.exit_json(changed=True)
    remove_leftovers(dest)
    private = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.", dir=os.path.dirname(dest))  # 0700
    try:
        archive, tree = os.path.join(private, "archive"), os.path.join(private, "tree")
        try:
            actual, size = download(url, archive, module.params["timeout"])
        except (OSError, ValueError) as error:  # HTTP errors and timeouts
            module.fail_json(msg=f"downloading {shown} failed: {str(error).replace(url, shown)}")
        if actual != expected:
            module.fail_json(msg=f"{shown} has SHA-256 {actual}, not the published {expected}: the copy on the server "
                                 "changed or broke after it was published; nothing was unpacked")
        said = unpack(archive, tree, module.params["compress_program"])
        if said:
            module.fail_json(msg=f"tar could not unpack {shown}; tar said: {said}")
        if os.path.isdir(dest):
            os.rmdir(dest)
        os.rename(tree, dest)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    module.exit_json(changed=True, bytes=size)


if __name__ == "__main__":
    main()
