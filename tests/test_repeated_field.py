"""The gateway's Lua action that names a request body's repeated (or escaped) top-level field: HAProxy's json_query
reads a field's first value and vLLM's parser its last, so such a body could pass the gateway's checks with one
model and reach a scene with another. Run by the distro's Lua 5.3, as HAProxy embeds it."""

from __future__ import annotations

import json
import shutil
import subprocess

from conftest import REPO

LUA_FILE = REPO / "roles" / "vllm_gateway" / "files" / "repeated_field.lua"
LUA = shutil.which("lua5.3") or "lua5.3"  # tools/install-host-packages installs it


def repeated(bodies: list[str]) -> list[str | None]:
    """Return what the action names for each body (None: nothing repeated)."""
    script = (f"local fields = dofile({json.dumps(str(LUA_FILE))})\n"
              "for line in io.lines() do\n"
              "  local body = line:gsub('\\\\n', '\\n')\n"
              "  print(fields.repeated(body) or '')\n"
              "end\n")
    run = subprocess.run([str(LUA), "-e", script], input="".join(b.replace("\n", "\\n") + "\n" for b in bodies),
                         capture_output=True, text=True, check=True, timeout=30)
    return [line or None for line in run.stdout.split("\n")[:len(bodies)]]


CASES = [
    ('{"model":"allowed","messages":[],"model":"other"}', "model"),
    ('{"mod\\u0065l":"other","model":"allowed"}', "mod\\u0065l"),
    ('{"model":"a","n":1,"messages":[{"role":"user","content":"x"}],\n "n" : 2}', "n"),
    ('{"model":"a","x":{"model":"b"},"y":[{"model":1},"model",{"n":1,"n":2}]}', None),
    ('{"model":"a","messages":[{"content":"{\\"model\\":\\"b\\"}, \\"model\\": [\\"c\\"]"}]}', None),
    ('{"model":"a","stop":["}","]",",","\\\\"],"n":1}', None),
    ('[{"model":"a"},{"model":"b"}]', None),
    ('{"model":"unterminated', None),
    ("", None),
]


def test_repeated_or_escaped_top_level_fields_are_named() -> None:
    """A repeated top-level name is named, and so is an escaped one (a parser reads it as the plain name); names
    inside nested objects, arrays and strings (braces, quotes, commas and backslashes among them) are not."""
    assert repeated([body for body, _ in CASES]) == [want for _, want in CASES]


def test_a_large_body_is_scanned_quickly() -> None:
    """A body at the gateway's default size limit (256 KiB, one long message) is scanned in well under a second."""
    body = json.dumps({"model": "a", "messages": [{"role": "user", "content": "word, [x] {y} " * 18000}],
                       "model2": 1})
    assert len(body) > 250_000
    assert repeated([body]) == [None]
