"""Pure logic of vllm-fleet, shared by the Ansible plugins and the tools; no I/O here."""
