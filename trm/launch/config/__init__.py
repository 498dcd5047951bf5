"""A launch's configuration: its environment variables, the settings read from them, its directories."""
