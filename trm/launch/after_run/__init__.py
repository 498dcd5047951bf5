"""After the run: the handoff bundle, sync to SYNC_TO, releasing the machine, the run ledger, TensorBoard."""
