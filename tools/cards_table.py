#!/usr/bin/env python3
"""Write the hardware registry's tables into the docs: the profiles (docs/hardware.md), the SLO gates (docs/slo.md) and
the alert rules that hold scenes and cards to them (docs/monitoring.md).

Run it after changing plugins/plugin_utils/cards.py: `tools/cards_table.py --write`; tests/test_cards.py fails while a doc
differs from the registry.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, monitoring

REPO = Path(__file__).resolve().parents[1]


BLOCK = re.compile(r"(<!-- registry:(?P<name>\w+) -->\n).*?(<!-- registry:end -->)", re.S)


def _number(value: float) -> str:
    """Format a figure with thousands separators and no trailing .0."""
    return f"{value:,.1f}".removesuffix(".0")


def profiles_table() -> str:
    """Return the profiles as a Markdown table."""
    rows = ["| profile | nvidia-smi name | PCI id | arch | sm | memory MiB | GB/s | driver | max °C | P2P | gates |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for p in cards.PROFILES.values():
        gates = "measured" if p.gates else f"{cards.GATES_REFERENCE}'s" + (
            "" if p.bandwidth_gbps >= cards.PROFILES[cards.GATES_REFERENCE].bandwidth_gbps else ", scaled")
        rows.append(f"| `{p.key}` | {' / '.join(p.names)} | {' '.join(p.pci_ids)} | {p.architecture} | "
                    f"{cards.capability_text(p.compute_capability)} | {_number(p.memory_mib or 0)} | "
                    f"{_number(p.bandwidth_gbps)} | R{p.driver_branch} | {p.temperature_limit_c or '-'} | "
                    f"{'yes' if p.p2p else 'no'} | {gates} |")
    return "\n".join(rows) + "\n"


def gates_table() -> str:
    """Return every profile's gates per preset as a Markdown table."""
    rows = ["| profile | preset | TTFT p50 / p99 ms | TPOT p50 / p99 ms | max failed | min tok/s |",
            "|---|---|---:|---:|---:|---:|"]
    for profile, presets in cards.slo_table().items():
        for preset, g in presets.items():
            rows.append(f"| {profile} | {preset} | {g['median_ttft_ms']:g} / {g['p99_ttft_ms']:g} | "
                        f"{g['median_tpot_ms']:g} / {g['p99_tpot_ms']:g} | {g['max_failed']:g} | "
                        f"{g['min_output_throughput']:g} |")
    return "\n".join(rows) + "\n"


def alerts_table() -> str:
    """Return the alert rules (plugins/plugin_utils/monitoring.py) as a Markdown table."""
    rows = ["| alert | severity | for | fires when (PromQL) |", "|---|---|---|---|"]
    for name, alert in monitoring.ALERTS.items():
        expr = alert["expr"].replace("|", "\\|")
        rows.append(f"| `{name}` | {alert['severity']} | {alert['for']} | `{expr}` |")
    return "\n".join(rows) + "\n"


TABLES = {"profiles": profiles_table, "gates": gates_table, "alerts": alerts_table}
DOCS = [REPO / "docs" / "hardware.md", REPO / "docs" / "slo.md", REPO / "docs" / "monitoring.md"]


def rendered(text: str) -> str:
    """Return a doc's text with each registry block replaced by the registry's current table."""
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + m.group(3), text)


def main() -> int:
    """Check (default) or rewrite the docs' registry tables; exit 1 when a doc is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the docs instead of checking them")
    write = parser.parse_args().write
    stale = [doc for doc in DOCS if rendered(doc.read_text()) != doc.read_text()]
    for doc in stale:
        if write:
            doc.write_text(rendered(doc.read_text()))
        print(f"{doc.relative_to(REPO)}: {'rewritten' if write else 'differs from the registry'}")
    return 1 if stale and not write else 0


if __name__ == "__main__":
    sys.exit(main())
