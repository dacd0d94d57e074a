"""Vault hygiene: values encrypted with the lab's public password must never serve a real fleet."""

from __future__ import annotations

import re
from pathlib import Path

# The lab's vault id: its password is in the repo (inventory/lab/vault-password), so it protects nothing.
LAB_VAULT_ID = "lab"
# A vault 1.2 header names the id a value was encrypted with (1.1 headers name none).
VAULT_HEADER = re.compile(r"\$ANSIBLE_VAULT;1\.2;AES256;([^\s;]+)")
VARS_SUFFIXES = {"", ".yml", ".yaml", ".json"}


def vars_files(roots: list[str], groups: list[str], host: str) -> list[Path]:
    """Return the group_vars and host_vars files under each root that give a host its variables (files or
    directories named after its groups, 'all' and itself, with or without a YAML/JSON suffix)."""
    files: list[Path] = []
    for root in dict.fromkeys(roots):
        for kind, names in (("group_vars", [*groups, "all"]), ("host_vars", [host])):
            for entry in sorted((Path(root) / kind).glob("*")) if (Path(root) / kind).is_dir() else []:
                stem, suffix = (entry.stem, entry.suffix) if entry.is_file() else (entry.name, "")
                if stem in names and suffix in VARS_SUFFIXES:
                    files += [entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file())
    return files


def encrypted_with(files: list[Path], vault_id: str) -> list[str]:
    """Return the files holding a value encrypted with vault_id."""
    found = []
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if vault_id in VAULT_HEADER.findall(text):
            found.append(str(path))
    return found


def lab_secret_problem(host: str, roots: list[str], groups: list[str]) -> str:
    """Return the one-line refusal of a host given values encrypted with the lab's vault id ('' when none)."""
    found = encrypted_with(vars_files(roots, groups, host), LAB_VAULT_ID)
    if not found:
        return ""
    return (f"{host}: {', '.join(found)} hold(s) values encrypted with the lab's public vault password (vault id "
            f"{LAB_VAULT_ID}), which anyone can decrypt; encrypt them again with your own: ansible-vault "
            "encrypt_string --vault-id prod@prompt --name <variable> '<value>'")
