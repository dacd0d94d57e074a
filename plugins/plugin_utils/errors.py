"""Pure logic of vllm-fleet, shared by the Ansible plugins and the tools; no I/O here."""


class FleetError(ValueError):
    """Input the kit cannot use; the message names the variable and the fix."""
