"""Experiment suites: named variants of a recipe, expanded from data files, run one by one or as a batch.

- `suite`: the suite files (`suites/*.toml`), their expansion into named experiments and the checks that
  every experiment's overrides compose through the trainer's own configuration;
- `placement`: which GPUs each run gets and the command that starts it (the trainer, or torchrun);
- `outcome`: what a run directory says about a run (finished?, final and best metrics, best checkpoint);
- `batch`: the batch runner (logs, progress table, `batch_results.json`, skip / resume, signals).
"""
