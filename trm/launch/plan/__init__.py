"""The plan of a launch: its steps and commands (printed by --dry-run), and the paper runs' plans."""
