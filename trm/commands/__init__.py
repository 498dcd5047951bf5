"""Top-level commands of `python -m trm`; each module here defines `register(subparsers)`."""
