"""Benchmarks run by `nox -s bench -- <name>` (each a module with `main(argv) -> int`)."""
