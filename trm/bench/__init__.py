"""Benchmarks, run as `nox -s bench -- <name> [args]` (module `trm.bench.<name>`); never timed tests."""
