"""Single-line settings: the roles write their variables into units, env files and HAProxy configs line by line, so a
line break in one would start a line of its own there, with whatever follows it."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

# The C0 and C1 controls (C1 has NEL, a line end to YAML 1.1 and to Python's splitlines), DEL, and the Unicode line
# and paragraph separators, which some readers also take as a line end.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
FIX = "use a single line of printable characters"
# Where a list's index goes in a label, a document's path has [] (vllm_haproxy_files[].content).
INDEX = re.compile(r"\[\d+\]")


def document_path(label: str) -> str:
    """Return a value's label with its list indexes left out, as a document's path names it."""
    return INDEX.sub("[]", label)


def plain(container: Any, key: Any, label: str, documents: Collection[str] = ()) -> Any:
    """Return container[key] as plain dicts, lists and scalars, with None for the parts documents name (unread)."""
    if document_path(label) in documents:
        return None
    # Part by part, by key and index: reading a part of Ansible's value renders it, and a document is never read.
    value = container[key]
    if isinstance(value, Mapping):
        return {part: plain(value, part, f"{label}.{part}", documents) for part in value}
    if isinstance(value, (list, tuple)):
        return [plain(value, index, f"{label}[{index}]", documents) for index in range(len(value))]
    return value


def _strings(value: Any, label: str, documents: Collection[str]) -> Iterator[tuple[str, str]]:
    """Yield (label, text) for each string in value, dict keys included, leaving out the parts documents name."""
    if document_path(label) in documents:
        return
    if isinstance(value, str):
        yield label, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield f"{label} (a key)", key
            yield from _strings(item, f"{label}.{key}", documents)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings(item, f"{label}[{index}]", documents)


def control_character_problems(options: Mapping[str, Any], values: Mapping[str, Any],
                               documents: Collection[str] = ()) -> list[str]:
    """Return one line per variable of options whose value holds a line break or other control character."""
    # Every type is walked, not only str: a run of a role's preflight alone validates no type, so a string can come in
    # any setting, and a template writes it as it is.
    problems = []
    for name in options:
        if name not in values:
            continue
        for label, text in _strings(values[name], name, documents):
            found = CONTROL.search(text)
            if found:
                # The character alone: the value may be a key or a password.
                problems.append(f"{label}: holds a line break or control character ({found.group()!r}); {FIX}")
                break
    return problems
