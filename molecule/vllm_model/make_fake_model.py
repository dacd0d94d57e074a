#!/usr/bin/env python3
"""Write a small fake model (deterministic bytes from a seed), its manifest and a manifest with one wrong sha256.

Used by molecule/vllm_model/prepare.yml. Prints "wrote N files" when anything changed, "unchanged" otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

WEIGHTS = "model.safetensors"
WEIGHTS_BYTES = 3 * 1024 * 1024


def contents(seed: int) -> dict[str, bytes]:
    """The model's files by relative path: small JSON files, one in a subdirectory, and a few MB of weights."""
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "fake_seed": seed}
    return {
        "config.json": (json.dumps(config, indent=2) + "\n").encode(),
        "generation_config.json": b'{"max_new_tokens": 16}\n',
        "tokenizer/tokenizer_config.json": b'{"model_max_length": 4096}\n',
        WEIGHTS: random.Random(seed).randbytes(WEIGHTS_BYTES),
    }


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write data to path unless it already holds exactly that; tell whether it wrote."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def manifest(name: str, files: dict[str, bytes], corrupt: str = "") -> bytes:
    """The manifest.json of files; with corrupt, that file's sha256 is deliberately wrong."""
    entries = [{"path": path, "size": len(data),
                "sha256": hashlib.sha256(b"not the published bytes" if path == corrupt else data).hexdigest()}
               for path, data in sorted(files.items())]
    return (json.dumps({"name": name, "files": entries}, indent=2) + "\n").encode()


def main() -> None:
    """Parse the arguments and write the model and both manifests."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--bad-manifest", type=Path, required=True)
    args = parser.parse_args()
    files = contents(args.seed)
    name = args.directory.name
    written = [write_if_changed(args.directory / path, data) for path, data in files.items()]
    written.append(write_if_changed(args.manifest, manifest(name, files)))
    written.append(write_if_changed(args.bad_manifest, manifest(name, files, corrupt=WEIGHTS)))
    print(f"wrote {sum(written)} files" if any(written) else "unchanged")


if __name__ == "__main__":
    main()
