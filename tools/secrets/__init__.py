"""The repository secret scan (detect-secrets with our detectors) and its audited baseline."""
