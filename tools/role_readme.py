#!/usr/bin/env python3
"""Write each role's settings into its README.md from its meta/argument_specs.yml: the main entry point's variables,
then every other entry point that roles and playbooks include, each with its arguments.

Run it after changing a spec: `tools/role_readme.py --write`; tests/test_role_readmes.py fails while a README differs
from its spec. The text around the generated block is written by hand: what the role does and how.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
ROLES = REPO / "roles"
BEGIN = "<!-- spec:begin (tools/role_readme.py writes this part from meta/argument_specs.yml) -->"
END = "<!-- spec:end -->"
BLOCK = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
# Ansible's documentation markup in spec descriptions, as Markdown.
MARKUP = [(re.compile(r"\b[OCVPE]\(([^()]*)\)"), r"`\1`"), (re.compile(r"\bI\(([^()]*)\)"), r"*\1*"),
          (re.compile(r"\bB\(([^()]*)\)"), r"**\1**"), (re.compile(r"\bU\(([^()]*)\)"), r"\1"),
          (re.compile(r"\bL\(([^(),]*),\s*([^()]*)\)"), r"[\1](\2)")]


def prose(text: Any) -> str:
    """Return a spec description (a string or a list of them) as one Markdown line."""
    joined = " ".join(text) if isinstance(text, list) else str(text or "")
    for pattern, replacement in MARKUP:
        joined = pattern.sub(replacement, joined)
    return " ".join(joined.split()).replace("|", "\\|")


def type_of(option: dict[str, Any]) -> str:
    """Return an option's type as the table shows it, e.g. `list of str`."""
    kind = str(option.get("type", "str"))
    return f"{kind} of {option['elements']}" if option.get("elements") else kind


def default_of(option: dict[str, Any]) -> str:
    """Return an option's default as the table shows it: the YAML value, or required, or nothing."""
    if option.get("required"):
        return "required"
    if "default" not in option:
        return ""
    value = yaml.safe_dump(option["default"], default_flow_style=True, width=10_000).strip()
    value = value.removesuffix("...").strip()
    return "`" + value.replace("|", "\\|") + "`"


def options_table(options: dict[str, Any]) -> list[str]:
    """Return a Markdown table of options: name, type, default, description (choices after it)."""
    rows = ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name, option in options.items():
        described = prose(option.get("description"))
        if option.get("choices"):
            described += " One of " + ", ".join(f"`{choice}`" for choice in option["choices"]) + "."
        rows.append(f"| `{name}` | {type_of(option)} | {default_of(option)} | {described.strip()} |")
    return rows


def generated(specs: dict[str, Any]) -> str:
    """Return the block a role's README holds for its argument specs."""
    lines = [BEGIN, "", "## Variables", ""]
    main = specs.get("main") or {}
    options = main.get("options") or {}
    lines += options_table(options) if options else ["None: the role reads the kit's shared settings only."]
    for entry, spec in specs.items():
        if entry == "main":
            continue
        lines += ["", f"## Entry point `tasks_from: {entry}`", "", prose(spec.get("short_description"))]
        if spec.get("description"):
            lines += ["", prose(spec["description"])]
        if spec.get("options"):
            lines += [""] + options_table(spec["options"])
    return "\n".join(lines + ["", END])


def rewritten(role: Path) -> str:
    """Return the role's README with its generated block as the spec has it now."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    text = (role / "README.md").read_text()
    if not BLOCK.search(text):
        raise SystemExit(f"{role / 'README.md'}: no generated block; put the lines {BEGIN} and {END} where it goes")
    return BLOCK.sub(lambda _: generated(specs), text)


def main(argv: list[str]) -> int:
    """Check (default) or write every role's README; 1 when one differs and --write was not given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the READMEs that differ")
    args = parser.parse_args(argv)
    stale = []
    for role in sorted(p.parent.parent for p in ROLES.glob("*/meta/argument_specs.yml")):
        text = rewritten(role)
        if text != (role / "README.md").read_text():
            stale.append(role.name)
            if args.write:
                (role / "README.md").write_text(text)
    if stale and not args.write:
        print(f"role_readme: out of date: {', '.join(stale)}; run tools/role_readme.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
