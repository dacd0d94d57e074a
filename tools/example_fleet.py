"""The example fleet (inventory/example) made checkable: a copy with a pinned revision and its secrets, plain, where
a real fleet keeps them in Vault. Its hosts' addresses (192.0.2.0/24) reach nothing, so a run that contacts a host
shows it as unreachable. Used by the check.yml tests and benchmark."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SECRETS = {"gpu_hosts": {"vault_realtime_api_key": "r" * 40, "vault_batch_api_key": "b" * 40},
           "gateways": {"vault_gateway_key_alice": "a" * 40, "vault_gateway_key_ci_bots": "c" * 40}}
PINNED = "0123456789abcdef" * 2 + "01234567"


def example_fleet(where: Path) -> Path:
    """Copy the example inventory under where, pin its model revision, add its secrets; return the copy's path."""
    inventory = where / "inventory"
    shutil.copytree(REPO / "inventory" / "example", inventory)
    group_vars = inventory / "group_vars" / "gpu_hosts" / "main.yml"
    group_vars.write_text(group_vars.read_text().replace("REPLACE-WITH-THE-40-HEX-COMMIT-YOU-TESTED", PINNED))
    for group, values in SECRETS.items():
        (inventory / "group_vars" / group / "secrets.yml").write_text(yaml.safe_dump(values))
    return inventory
