"""The lines every HAProxy config of the kit shares have one home (plugins/plugin_utils/haproxy.py): both configs
print them and restate none."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import haproxy

TEMPLATES = [REPO / "roles/vllm_gateway/templates/haproxy.cfg.j2", REPO / "roles/vllm_ingress/templates/haproxy.cfg.j2"]


def test_shared_lines_hold_tls_floors_logging_and_http() -> None:
    """Listeners (and servers, when asked) at TLS 1.2+ with the given ciphers, no tickets; logs to stdout; HTTP."""
    lines = haproxy.shared_lines(["A", "B"], servers=True)
    assert "    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets" in lines["global"].splitlines()
    assert "    ssl-default-server-ciphers A:B" in lines["global"].splitlines()
    assert "    log stdout format raw daemon notice" in lines["global"].splitlines()
    assert "ssl-default-server" not in haproxy.shared_lines(["A"])["global"]
    assert lines["defaults"].splitlines() == ["    mode http", "    log global", "    option dontlog-normal",
                                              "    timeout connect 3s"]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: path.parts[-3])
def test_each_config_prints_the_shared_lines_and_restates_none(template: Path) -> None:
    """A config prints shared.global and shared.defaults, and writes none of their directives itself."""
    text = template.read_text()
    assert "{{ shared.global }}" in text and "{{ shared.defaults }}" in text
    for directive in ("ssl-default-bind-options", "ssl-default-bind-ciphers", "ssl-default-server", "log stdout",
                      "mode http", "log global", "option dontlog-normal", "timeout connect"):
        assert directive not in text, directive
