#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: share a scene's compiled artefacts between hosts of one platform as checked bundles."""

from __future__ import annotations

DOCUMENTATION = r"""
module: compile_cache
short_description: Probe, seed, pack and publish the compile-cache bundles of vLLM scenes
description:
  - C(probe) reads what a bundle key needs from the host - the CPU flags, the installed models' markers, the bundle
    each scene's cache records, whether any of its compiled parts holds anything, and whether the compressor is
    installed (a warning when not) - and changes nothing.
  - C(seed) checks a bundle's SHA-256 before it reads it, unpacks it into a private staging directory beside the
    scene's cache, refuses it unless its manifest carries the expected key, and moves into the cache only what the
    cache lacks. A bundle that must not be used is not a failure - the module warns, naming the bundle and why, and
    leaves the cache as it was, so the scene compiles for itself.
  - C(pack) writes the scene's compiled parts and a manifest with the key into a zstd tar on the host.
  - C(record) notes that a scene's cache holds the artefacts of a bundle (it compiled them itself).
  - C(publish), on the controller, moves a fetched bundle into the store under its digest, writes its index entry
    last, and keeps at most I(keep) bundles per scene.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  state:
    description: What to do.
    type: str
    required: true
    choices: [probe, seed, pack, record, publish]
  cache_dir:
    description: The scene's cache directory (C(seed), C(pack), C(record)), or the root of all scene caches (C(probe)).
    type: path
  scenes:
    description: C(probe) - the scene names whose records to read.
    type: list
    elements: str
    default: []
  model_paths:
    description: C(probe) - the model directories whose markers to read.
    type: list
    elements: path
    default: []
  name:
    description: The bundle's name.
    type: str
  key:
    description: The bundle's key; C(seed) refuses a bundle whose manifest carries another one.
    type: dict
  archive:
    description: The bundle file - read by C(seed) and C(publish), written by C(pack).
    type: path
  checksum:
    description: C(seed) - the bundle's published SHA-256.
    type: str
  parts:
    description: The cache's subdirectories that hold compiled artefacts.
    type: list
    elements: str
    default: []
  owner:
    description: C(seed) - the account that owns what is unpacked (the scene's service user).
    type: str
  group:
    description: C(seed) - the group that owns what is unpacked.
    type: str
  store:
    description: C(publish) - the controller's bundle directory.
    type: path
  keep:
    description: C(publish) - bundles kept per scene, the newest first.
    type: int
    default: 3
  compress_program:
    description: The zstd command line that packs (C(-c) added) and unpacks (C(-dc) added).
    type: str
    default: zstd -1 -T0
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
- name: Seed realtime's cache from the bundle the controller published
  vllm.fleet.compile_cache:
    state: seed
    archive: /var/tmp/vllm-fleet-compile-realtime-0123456789abcdef.tar.zst
    checksum: "{{ bundle.sha256 }}"
    cache_dir: /var/lib/vllm/cache/realtime
    name: realtime-0123456789abcdef
    key: "{{ bundle.key }}"
    parts: [vllm/torch_compile_cache, inductor, triton, flashinfer, precompiled_headers]
    owner: vllm
    group: vllm
"""

RETURN = r"""
seeded:
  description: C(seed) - whether the cache now holds the bundle's artefacts.
  returned: state is seed
  type: bool
moved:
  description: C(seed) - the entries moved into the cache.
  returned: state is seed
  type: list
sha256:
  description: C(pack) and C(publish) - the bundle's SHA-256.
  returned: state is pack or publish
  type: str
"""

import grp  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
from typing import Any, Dict  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_compile_cache import (  # noqa: E402
    BundleError, index, pack, present_parts, publish, read_record, seed, sha256_file, write_record)

REQUIRED = {"probe": ["cache_dir"], "seed": ["archive", "checksum", "cache_dir", "name", "key", "owner", "group"],
            "pack": ["archive", "cache_dir", "name", "key"], "record": ["cache_dir", "name"],
            "publish": ["archive", "store", "name", "key"]}


def probe(module: AnsibleModule, params: Dict[str, Any]) -> Dict[str, Any]:
    """Return the CPU flags line, the models' markers by path, each scene's recorded bundle, and whether the
    compressor is there (warning when it is not)."""
    compressor = params["compress_program"].split()[0]
    if not shutil.which(compressor):
        module.warn(f"{compressor} is not installed: this host neither seeds nor shares compile-cache bundles. Install "
                    "it (vllm_system_packages lists zstd) or set vllm_scenes_share_compile_cache: false.")
    flags = ""
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
        for line in cpuinfo:
            if re.match(r"^(flags|Features)\s*:", line):
                flags = line.strip()
                break
    models: Dict[str, Any] = {}
    for path in params["model_paths"]:
        try:
            with open(os.path.join(path, ".vllm-fleet-model.json"), encoding="utf-8") as marker:
                # Only the verified file list: the marker's origin may name a URL with credentials.
                models[path] = {"files": json.load(marker).get("files")}
        except (OSError, ValueError, AttributeError):
            models[path] = None
    caches = {scene: os.path.join(params["cache_dir"], scene) for scene in params["scenes"]}
    return {"changed": False, "cpu_flags": flags, "models": models, "compressor": bool(shutil.which(compressor)),
            "recorded": {scene: read_record(path) for scene, path in caches.items()},
            "compiled": {scene: bool(present_parts(path, params["parts"])) for scene, path in caches.items()}}


def run_seed(module: AnsibleModule, params: Dict[str, Any]) -> Dict[str, Any]:
    """Seed the scene's cache, or warn and leave it as it was."""
    if module.check_mode:
        return {"changed": True, "seeded": False, "moved": []}
    try:
        uid, gid = pwd.getpwnam(params["owner"]).pw_uid, grp.getgrnam(params["group"]).gr_gid
        moved = seed(params["archive"], params["checksum"].strip().lower(), params["cache_dir"], params["name"],
                     params["key"], params["parts"], params["compress_program"], uid, gid)
    except (BundleError, KeyError, OSError) as error:
        module.warn(f"compile-cache bundle {params['name']} not used for {params['cache_dir']}: {error}. "
                    "The cache is as it was; the scene compiles for itself.")
        return {"changed": False, "seeded": False, "moved": [], "refused": str(error)}
    return {"changed": True, "seeded": True, "moved": moved}


def run_pack(module: AnsibleModule, params: Dict[str, Any]) -> Dict[str, Any]:
    """Pack the scene's compiled parts, when it has any, and record the bundle in its cache."""
    if not present_parts(params["cache_dir"], params["parts"]):
        return {"changed": False, "packed": False}
    if module.check_mode:
        return {"changed": True, "packed": False}
    try:
        size = pack(params["cache_dir"], params["parts"], params["name"], params["key"], params["archive"],
                    params["compress_program"])
    except (BundleError, OSError) as error:
        module.fail_json(msg=f"packing {params['cache_dir']} into {params['archive']} failed: {error}")
    write_record(params["cache_dir"], params["name"])
    return {"changed": True, "packed": True, "size": size, "sha256": sha256_file(params["archive"])}


def main() -> None:
    """Dispatch on state; seed never fails for a bad bundle, the others fail with the reason."""
    module = AnsibleModule(argument_spec={
        "state": {"type": "str", "required": True, "choices": sorted(REQUIRED)},
        "cache_dir": {"type": "path"}, "scenes": {"type": "list", "elements": "str", "default": []},
        "model_paths": {"type": "list", "elements": "path", "default": []}, "name": {"type": "str"},
        "key": {"type": "dict", "no_log": False}, "archive": {"type": "path"}, "checksum": {"type": "str", "no_log": False},
        "parts": {"type": "list", "elements": "str", "default": []}, "owner": {"type": "str"},
        "group": {"type": "str"}, "store": {"type": "path"}, "keep": {"type": "int", "default": 3},
        "compress_program": {"type": "str", "default": "zstd -1 -T0"}},
        required_if=[("state", state, needed) for state, needed in REQUIRED.items()], supports_check_mode=True)
    params, state = module.params, module.params["state"]
    if state == "probe":
        module.exit_json(**probe(module, params))
    if state == "seed":
        module.exit_json(**run_seed(module, params))
    if state == "pack":
        module.exit_json(**run_pack(module, params))
    if state == "record":
        changed = module.check_mode and read_record(params["cache_dir"]) != params["name"]
        if not module.check_mode:
            changed = write_record(params["cache_dir"], params["name"])
        module.exit_json(changed=changed)
    if module.check_mode:
        module.exit_json(changed=True)
    if params["keep"] < 1:
        module.fail_json(msg=f"keep must be at least 1 (the bundle just published), not {params['keep']}")
    os.makedirs(params["store"], mode=0o700, exist_ok=True)
    result = publish(params["archive"], params["store"], params["name"], params["key"], params["keep"])
    module.exit_json(changed=True, published=sorted(index(params["store"])), **result)


if __name__ == "__main__":
    main()
