"""The plan of a launch: its steps (each with its action) and commands, printed by --dry-run; the GPUs it is
resolved on; the paper runs' plans."""
