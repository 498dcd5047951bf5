"""The training run lifecycle: config, distributed setup, loop, checkpoints, signals, metric logs."""
