"""After the run: the handoff bundle and the TensorBoard view of a run."""
