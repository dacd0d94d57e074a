"""vllm-fleet lab: real systemd hosts in systemd-nspawn machines, each in its own network namespace."""
