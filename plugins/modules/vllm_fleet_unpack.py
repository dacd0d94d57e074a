#!/usr/bin/python
"""Ansible module: stream a compressed tar archive from a URL into tar while taking its SHA-256, in one pass."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_fleet_unpack
short_description: Download a compressed tar archive and unpack it in one pass, checking its SHA-256
description:
  - Streams the archive at I(url) into C(tar --extract) while it hashes it, so the host neither stores the archive nor
    reads it a second time.
  - Fails when tar fails or the digest is not I(checksum). What tar wrote into I(dest) by then stays there; the caller
    removes it, and counts I(dest) as complete only once it has checked it.
version_added: "0.1.0"
author: vllm-fleet
options:
  url:
    description: HTTP(S) URL of the archive.
    type: str
    required: true
  checksum:
    description: The archive's SHA-256, as 64 hexadecimal digits.
    type: str
    required: true
  dest:
    description: Existing directory to unpack into; tar keeps the archive's modes and times.
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
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Download and unpack the packed release
  vllm_fleet_unpack:
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
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
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


def main() -> None:
    """Stream url into tar under dest; fail on a bad checksum argument, a download or tar error, or another digest."""
    module = AnsibleModule(argument_spec={
        "url": {"type": "str", "required": True}, "checksum": {"type": "str", "required": True},
        "dest": {"type": "path", "required": True}, "compress_program": {"type": "str", "default": "zstd"},
        "timeout": {"type": "int", "default": 60}}, supports_check_mode=True)
    url, expected = module.params["url"], module.params["checksum"].strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        module.fail_json(msg=f"checksum must be a SHA-256 of 64 hexadecimal digits, not {expected!r}")
    if module.check_mode:
        module.exit_json(changed=True)
    # tar's messages go to a file: a pipe nobody reads while the download runs could fill up and stall tar.
    with tempfile.TemporaryFile() as tar_errors:
        tar = subprocess.Popen(["tar", "--extract", f"--use-compress-program={module.params['compress_program']}",
                                "--directory", module.params["dest"], "--file", "-"],
                               stdin=subprocess.PIPE, stderr=tar_errors)
        assert tar.stdin is not None
        actual, size = "", 0
        try:
            with open_url(url, timeout=module.params["timeout"]) as response:
                actual, size = copy_hashing(read_chunks(response), tar.stdin)
            tar.stdin.close()
            failure = "" if tar.wait() == 0 else f"tar could not unpack {url}"
        except (OSError, ValueError) as error:  # HTTP errors, timeouts, and tar gone early (broken pipe)
            tar.kill()
            tar.wait()
            failure = f"downloading {url} into tar failed: {error}"
        tar_errors.seek(0)
        said = tar_errors.read().decode(errors="replace").strip()[-1000:]
    if failure:
        module.fail_json(msg=f"{failure}; tar said: {said or 'nothing'}")
    if actual != expected:
        module.fail_json(msg=f"{url} has SHA-256 {actual}, not the published {expected}: the copy on the server "
                             "changed or broke after it was published")
    module.exit_json(changed=True, bytes=size)


if __name__ == "__main__":
    main()
