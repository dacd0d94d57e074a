"""The vllm_model role's wiring: its filters exist, its README documents its variables, its defaults stay safe."""

from __future__ import annotations

import re

import yaml

from conftest import REPO

ROLE = REPO / "roles" / "vllm_model"



def _role_sources() -> str:
    """All YAML of the role (tasks and vars), concatenated."""
    return "\n".join(p.read_text() for p in sorted(ROLE.rglob("*.yml")))


def test_readme_documents_every_variable() -> None:
    """The README's variables table lists each variable of defaults/main.yml."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    readme = (ROLE / "README.md").read_text()
    missing = [name for name in defaults if f"| `{name}` |" not in readme]
    assert not missing, f"README.md lacks rows for {missing}"


def test_token_is_kept_out_of_logs_and_command_lines() -> None:
    """The token is given by its variable's name (argument checks never read it) and read only by the download task,
    via stdin, under no_log."""
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    assert "vllm_model_hf_token" not in spec["argument_specs"]["main"]["options"]
    tasks = yaml.safe_load((ROLE / "tasks" / "fetch.yml").read_text())

    def walk(items: list[dict[str, object]]) -> list[dict[str, object]]:
        """Flatten blocks and rescues into the list of their tasks."""
        out: list[dict[str, object]] = []
        for item in items:
            if "block" not in item:
                out.append(item)
            for key in ("block", "rescue", "always"):
                out += walk(item.get(key, []))  # type: ignore[arg-type]
        return out

    sources = [(ROLE / d / "main.yml").read_text() for d in ("vars", "defaults")]
    token_use = re.compile(r"\{\{[^}]*\bvllm_model_hf_token_var\b")
    assert not any(token_use.search(s) for s in sources), "the token is templated into a variable"
    users = [t for t in walk(tasks) if token_use.search(yaml.safe_dump(t))]
    assert [t["name"] for t in users] == ["Run hf download as the service user"]
    [task] = users
    assert task["no_log"] is True
    assert task["ansible.builtin.command"]["stdin"] == (  # type: ignore[index]
        "{{ lookup('ansible.builtin.vars', vllm_model_hf_token_var) if vllm_model_hf_token_var else '' }}")
    argv = yaml.safe_dump(task["ansible.builtin.command"]["argv"])  # type: ignore[index]
    assert not re.search(r"\bvllm_model_hf_token_var\b", argv)
    assert "HF_TOKEN" not in yaml.safe_dump(task.get("environment", ""))
