"""GPU-host launch tooling: hardware detection, config selection, preflight, supervision and handoff."""
