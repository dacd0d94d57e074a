"""Filters over the hardware registry (plugin_utils/cards.py): presets, card matchers, the driver floor."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards
from ansible_collections.vllm.fleet.plugins.plugin_utils.filters import guarded


def presets(custom: dict[str, Any]) -> dict[str, Any]:
    """Return the kit's built-in presets (the hardware registry's) with the user's own merged over them."""
    return {**cards.presets(), **(custom or {})}


def card_matchers(_ignored: Any = None) -> dict[str, Any]:
    """Return the registry's names, PCI ids and compute capability per GPU profile, for vllm_fleet_gpu_facts."""
    return cards.matchers()


class FilterModule:
    """Filters vllm.fleet.cards_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "cards_presets": presets,
            "cards_matchers": card_matchers,
            "cards_driver_floor": guarded(cards.driver_branch_for_cuda),
        }
