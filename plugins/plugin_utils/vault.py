"""Vault hygiene: values encrypted with the lab's public password must never serve a real fleet."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The lab's vault password is in the repo, so it protects nothing. It lies outside inventory/ (Ansible reads every
# file of an inventory directory as an inventory source: this one would become a host named after the password), beside
# this guard, so that an installed collection, which holds no tools/, still has what the guard tries.
LAB_PASSWORD_FILE = Path(__file__).resolve().parent / "lab-vault-password"
# A vault envelope: its header, then lines of hex. A header says nothing about the password (any label, or none, can
# go with any password), so only decrypting tells whose a value is. Lines may be joined by spaces or by a literal \n
# (an INI file gives a value as it is written).
ENVELOPE = re.compile(r"\$ANSIBLE_VAULT;[^\s\\]+(?:(?:\s|\\n)+[0-9a-fA-F]+)+")
SEPARATOR = re.compile(r"(?:\s|\\n)+")


def envelopes(value: Any, seen: set[int] | None = None) -> Iterator[str]:
    """Yield the vault envelopes anywhere in a variable's value, each with its lines joined by newlines: !vault values,
    values decrypted from one, and strings holding one."""
    # Imported here: importing Ansible's vault at collection time changes how the unit tests' modules warn.
    from ansible.parsing.vault import VaultHelper

    seen = set() if seen is None else seen
    ciphertext = VaultHelper.get_ciphertext(value, with_tags=False)
    if ciphertext is not None or isinstance(value, str):
        for found in ENVELOPE.finditer(ciphertext if ciphertext is not None else value):
            header, body = SEPARATOR.split(found.group(0), maxsplit=1)
            yield f"{header}\n{SEPARATOR.sub('', body)}"
        return
    if isinstance(value, (dict, list, tuple, set, frozenset)) and id(value) not in seen:
        seen.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            yield from envelopes(item, seen)


def decrypts(envelope: str, password: bytes) -> bool:
    """Return whether password decrypts a vault envelope."""
    from ansible.parsing.vault import VaultLib, VaultSecret, parse_vaulttext_envelope

    try:
        # The password goes by the envelope's own vault id, so that a configuration matching secrets to ids
        # (vault_id_match) cannot make it skip the envelope.
        vault_id = parse_vaulttext_envelope(envelope.encode())[3]
        VaultLib([(vault_id, VaultSecret(password))]).decrypt(envelope)
    except Exception:  # noqa: BLE001 - not decryptable (another password, not vault text): not the lab's
        return False
    return True


def lab_encrypted(variables: dict[str, Any], password: bytes) -> list[str]:
    """Return the names of the variables whose value holds, anywhere, a vault value that password decrypts."""
    return sorted(name for name, value in variables.items()
                  if any(decrypts(envelope, password) for envelope in envelopes(value)))


def lab_secret_problem(host: str, hostvars: Any) -> str:
    """Return the one-line refusal of a host whose variables hold a value the lab's public vault password decrypts
    ('' when none). hostvars is Ansible's: its raw_get gives the host's variables from every source (inventory
    files of any format, group_vars, host_vars, extra vars) as loaded, without templating or decrypting them."""
    names = lab_encrypted(hostvars.raw_get(host), LAB_PASSWORD_FILE.read_bytes().strip())
    if not names:
        return ""
    return (f"{host}: {', '.join(names)}: encrypted with the lab's public vault password, which anyone can decrypt; "
            f"encrypt {'it' if len(names) == 1 else 'each'} again with your own: ansible-vault encrypt_string "
            f"--vault-id prod@prompt --name {names[0]} '<value>'")
