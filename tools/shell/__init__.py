"""Shell references in runbooks, jobs and SkyPilot tasks: make targets, nox sessions, modules and flags that exist."""
