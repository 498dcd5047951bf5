"""GPU-host launch tooling, one subpackage per component, each importing only the ones listed before it
(tests/test_import_layers.py, LAUNCH_LAYERS): `host` (is this machine fit: preflight, GPUs, the hardware
table), `provider` (releasing the rented machine: ON_END / ON_BUDGET), `storage` (copying the run to
SYNC_TO), `config` (the launch's environment variables and settings), `cost` (time and cost estimates, the
MAX_HOURS budget), `plan` (the steps and commands of a launch), `supervision` (torchrun under supervision:
the run ledger, the smoke gate, the probe, out-of-memory step-downs, the per-rank worker), `handoff` (the
bundle, TensorBoard) and `launcher` (the launch itself: the named sequence of steps)."""
