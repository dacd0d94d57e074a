"""tools/lab_vault.py: the lab's Vault files decrypt with its public password; plain values pass through."""

from pathlib import Path

import lab_vault

LAB_VARS = lab_vault.REPO / "inventory" / "lab" / "group_vars"


def test_lab_scene_and_gateway_keys_decrypt() -> None:
    """The lab's scene keys and its gateway user's key come out as the long keys preflight accepts."""
    found = lab_vault.lab_secrets(LAB_VARS / "gpu_hosts" / "vault.yml", LAB_VARS / "gateways" / "vault.yml")
    for name in ("vault_lab_realtime_api_key", "vault_lab_batch_api_key", "vault_lab_gateway_key_lab_user"):
        assert len(found[name]) >= 32 and "$ANSIBLE_VAULT" not in found[name]


def test_plain_values_and_empty_files_pass_through(tmp_path: Path) -> None:
    """A file without vault strings reads as YAML; an empty one adds nothing."""
    (tmp_path / "plain.yml").write_text("a: b\n")
    (tmp_path / "empty.yml").write_text("")
    assert lab_vault.lab_secrets(tmp_path / "plain.yml", tmp_path / "empty.yml") == {"a": "b"}
