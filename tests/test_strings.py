"""Single-line settings: a setting whose value holds a line break or another control character is refused, named with
its character and never its value."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from conftest import fleet_filters

from ansible_collections.vllm.fleet.plugins.plugin_utils import strings

# As meta/argument_specs.yml gives them: the check reads the names; the types say what the values look like.
OPTIONS = {
    "vllm_fleet_scene_cache_dir": {"type": "path"},
    "vllm_gateway_timeout": {"type": "str"},
    "vllm_gateway_paths": {"type": "list", "elements": "str"},
    "vllm_gateway_users": {"type": "list", "elements": "dict"},
    "vllm_scenes_env": {"type": "dict"},
    "vllm_gateway_port": {"type": "int"},
    "vllm_monitoring_route": {"type": "raw"},
}
CLEAN = {
    "vllm_fleet_scene_cache_dir": "/var/lib/vllm/cache",
    "vllm_gateway_timeout": "30m",
    "vllm_gateway_paths": ["/v1/chat/completions", "/v1/completions"],
    "vllm_gateway_users": [{"name": "alice", "key_var": "vault_gateway_key_alice", "models": ["qwen2.5-7b"],
                            "requests_per_minute": 600}],
    "vllm_scenes_env": {"OMP_NUM_THREADS": 8, "NOTE": "café, 100 % \"quoted\" ~ ünïcode"},
    "vllm_gateway_port": 443,
    "vllm_monitoring_route": "soon",
}
RULE = "holds a line break or control character"
FIX = "use a single line of printable characters"


def problems(**values: Any) -> list[str]:
    """The problems of the clean values with these in their place."""
    return strings.control_character_problems(OPTIONS, {**CLEAN, **values})


def test_clean_values_pass() -> None:
    """Paths, durations, lists, users, an environment with spaces, quotes and letters beyond ASCII: no problem."""
    assert strings.control_character_problems(OPTIONS, CLEAN) == []


def test_a_newline_is_named_with_its_setting_and_character() -> None:
    """The injection into the scene's unit: the setting and '\\n', one line, as the kit's other refusals."""
    assert problems(vllm_fleet_scene_cache_dir="/var/lib/vllm/cache\nExecStartPre=/bin/sh -c 'id > /tmp/pwned'") == [
        f"vllm_fleet_scene_cache_dir: {RULE} ('\\n'); {FIX}"]


def test_a_tab_is_refused() -> None:
    """Any C0 control, a tab too."""
    assert problems(vllm_gateway_timeout="30m\t") == [f"vllm_gateway_timeout: {RULE} ('\\t'); {FIX}"]


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x00", "\r", "\x1b", "\x1f", "\x7f", "\x85"])
def test_every_line_end_and_control_character_is_refused(char: str) -> None:
    """The Unicode line and paragraph separators, NUL, CR, ESC, US, DEL and NEL (a line end to YAML 1.1)."""
    assert problems(vllm_monitoring_route=f"soon{char}") == [f"vllm_monitoring_route: {RULE} ({char!r}); {FIX}"]


@pytest.mark.parametrize("char", [" ", "~", "\xa0", "é", "\u2027", "\u202a"])
def test_printable_neighbours_pass(char: str) -> None:
    """Space, tilde, no-break space and letters pass, as do the characters beside the line separators."""
    assert problems(vllm_gateway_timeout=f"30{char}m") == []


def test_a_nested_user_name_is_named_by_its_place() -> None:
    """vllm_gateway_users[1].name, without the name."""
    users = [*CLEAN["vllm_gateway_users"], {"name": "bob\nroot", "key_var": "vault_gateway_key_bob"}]
    assert problems(vllm_gateway_users=users) == [f"vllm_gateway_users[1].name: {RULE} ('\\n'); {FIX}"]


def test_a_list_of_strings_is_checked_item_by_item() -> None:
    """The item's index names it."""
    assert problems(vllm_gateway_paths=["/v1/completions", "/v1/x\r\n"]) == [
        f"vllm_gateway_paths[1]: {RULE} ('\\r'); {FIX}"]


def test_a_key_is_checked_and_not_shown() -> None:
    """A mapping's key goes into the unit as a variable name: refused as '(a key)', without the key."""
    found = problems(vllm_scenes_env={"OK": "1", "LD_PRELOAD\nX": "y"})
    assert found == [f"vllm_scenes_env (a key): {RULE} ('\\n'); {FIX}"]


def test_a_string_in_a_setting_of_another_type_is_checked() -> None:
    """A preflight run alone validates no type: a string given to an int setting reaches its template as it is."""
    assert problems(vllm_gateway_port="443\n  bind :80") == [f"vllm_gateway_port: {RULE} ('\\n'); {FIX}"]


def test_one_line_per_setting_in_the_spec_order() -> None:
    """Several bad places in one setting make one line; each bad setting its own."""
    found = problems(vllm_gateway_paths=["\n", "\t"], vllm_fleet_scene_cache_dir="\x00", vllm_gateway_timeout="\n")
    assert [line.split(":")[0] for line in found] == [
        "vllm_fleet_scene_cache_dir", "vllm_gateway_timeout", "vllm_gateway_paths[0]"]


def test_the_value_is_never_shown() -> None:
    """A secret's value stays out of the message, whatever its length or where the character is."""
    secret = "sk-live-0123456789abcdef"
    found = problems(vllm_gateway_timeout=f"{secret}\nLD_PRELOAD=/tmp/evil.so", vllm_scenes_env={"KEY": f"\u2028{secret}"},
                     vllm_gateway_users=[{"name": f"{secret}\x1b[2J"}])
    assert len(found) == 3
    assert all(secret not in line and "evil" not in line and "[2J" not in line for line in found), found


def test_undefined_and_unknown_settings_are_skipped() -> None:
    """A setting without a value is not a problem; a value outside the spec is not this check's."""
    assert strings.control_character_problems(OPTIONS, {"vllm_gateway_timeout": None, "other": "a\nb"}) == []


def test_a_document_keeps_its_lines() -> None:
    """A setting named as a document (a whole file's content) keeps its line breaks; the rest of its item is checked."""
    options = {"vllm_haproxy_config": {"type": "str"}, "vllm_haproxy_files": {"type": "list", "elements": "dict"}}
    values = {"vllm_haproxy_config": "global\n  log stdout\n",
              "vllm_haproxy_files": [{"name": "ca.pem", "content": "-----BEGIN CERTIFICATE-----\nMII\n"},
                                     {"name": "tls\n.pem", "content": "x\n"}]}
    documents = ["vllm_haproxy_config", "vllm_haproxy_files[].content"]
    assert strings.control_character_problems(options, values, documents) == [
        f"vllm_haproxy_files[1].name: {RULE} ('\\n'); {FIX}"]
    assert strings.control_character_problems(options, values)[0].startswith("vllm_haproxy_config: ")


class Rendered(Mapping[str, Any]):
    """A mapping as Ansible's are: reading an entry renders it, and some fail to render."""

    def __init__(self, entries: dict[str, Any]) -> None:
        """Keep the entries; an Exception among them is raised when it is read."""
        self.entries = entries
        self.read: list[str] = []

    def __getitem__(self, key: str) -> Any:
        """Render an entry: raise the exception it holds."""
        self.read.append(key)
        if isinstance(self.entries[key], Exception):
            raise self.entries[key]
        return self.entries[key]

    def __iter__(self) -> Iterator[str]:
        """The entries' names, as a template's keys are known before their values are rendered."""
        return iter(self.entries)

    def __len__(self) -> int:
        """How many entries."""
        return len(self.entries)


def test_a_document_is_never_read() -> None:
    """plain() reads a value part by part, and never the parts named as documents (they may not render yet)."""
    item = Rendered({"name": "ca.pem", "content": RuntimeError("the CA is not issued yet")})
    values = Rendered({"vllm_haproxy_config": RuntimeError("a template"), "vllm_haproxy_files": [item]})
    documents = ["vllm_haproxy_config", "vllm_haproxy_files[].content"]
    assert strings.plain(values, "vllm_haproxy_files", "vllm_haproxy_files", documents) == [
        {"name": "ca.pem", "content": None}]
    assert strings.plain(values, "vllm_haproxy_config", "vllm_haproxy_config", documents) is None
    assert values.read == ["vllm_haproxy_files"] and item.read == ["name"]


def test_the_filter_skips_what_cannot_be_rendered() -> None:
    """vllm.fleet.strings_problems over a task's vars: a value that fails to render (undefined, a Vault value without
    the Vault) is left out, the others are checked."""
    check = fleet_filters()["vllm.fleet.strings_problems"]
    variables = Rendered({**CLEAN, "vllm_gateway_timeout": KeyError("undefined"),
                          "vllm_gateway_users": [Rendered({"name": ValueError("vault")})],
                          "vllm_fleet_scene_cache_dir": "/x\ny"})
    assert check(OPTIONS, variables) == [f"vllm_fleet_scene_cache_dir: {RULE} ('\\n'); {FIX}"]
    assert check(OPTIONS, variables, ["vllm_fleet_scene_cache_dir"]) == []
