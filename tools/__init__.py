"""Repository tooling, run from a source checkout and never shipped in the wheel: runbooks, Kubernetes and
SkyPilot jobs, image builds and pins, releases, the secret scan, benchmarks and the GPU host check.

Imports point one way: tools/ may import trm/, trm/ never imports tools/ (tests/test_import_layers.py).
"""
