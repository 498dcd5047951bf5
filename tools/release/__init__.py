"""Releases: clean checkout to pushed images, pinned lock, re-stamped runbooks and jobs (make release)."""
