"""The lab's Vault variables, decrypted with the lab's public password (plugins/plugin_utils/lab-vault-password): for
the molecule tests and benchmarks that act as the lab's clients. Never for a real inventory's secrets."""

from __future__ import annotations

from pathlib import Path

import yaml

# The guard that refuses the lab's secrets outside the lab reads the same file.
from ansible_collections.vllm.fleet.plugins.plugin_utils.vault import LAB_PASSWORD_FILE as PASSWORD_FILE

REPO = Path(__file__).resolve().parents[1]

# Ansible's vault identity of the lab, for the lab's own runs (the kit's ansible.cfg names none: Makefile, molecule).
IDENTITY = f"lab@{PASSWORD_FILE}"


def lab_secrets(*files: Path) -> dict[str, str]:
    """Return the variables of YAML files whose values may be !vault strings of the lab's identity, decrypted."""
    # Imported here: importing Ansible's vault at collection time changes how the unit tests' modules warn.
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = VaultLib([("lab", VaultSecret(PASSWORD_FILE.read_bytes().strip()))])

    class Loader(yaml.SafeLoader):
        """YAML with Ansible's !vault tag."""

    Loader.add_constructor("!vault", lambda loader, node: vault.decrypt(loader.construct_scalar(node)).decode())
    found: dict[str, str] = {}
    for path in files:
        found.update(yaml.load(path.read_text(), Loader=Loader) or {})  # noqa: S506 - SafeLoader plus one tag
    return found
