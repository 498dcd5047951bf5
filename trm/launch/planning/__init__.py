"""Planning a launch: its settings (the environment variables), the plan and commands, estimates, the probe."""
