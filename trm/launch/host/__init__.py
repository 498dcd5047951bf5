"""Host checks: what the machine has (nvidia-smi, CUDA_VISIBLE_DEVICES, the hardware table) and whether it
can train (preflight, GPU checks)."""
