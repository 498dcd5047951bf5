"""Kubernetes jobs (jobs/): render, policy checks, image pins, experiment Indexed Jobs, SkyPilot tasks, copy-out."""
