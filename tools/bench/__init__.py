"""Benchmarks, run as `nox -s bench -- <name> [args]` (module `tools.bench.<name>`); never timed tests."""
