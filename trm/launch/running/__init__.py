"""Running a launch: the launcher and its steps, the supervisor, the per-rank worker, tmux, on-start scripts."""
