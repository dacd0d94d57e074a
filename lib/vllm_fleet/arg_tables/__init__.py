"""Engine-argument tables of the vLLM releases the kit pins, one module per release (tools/engine_arg_table.py)."""
