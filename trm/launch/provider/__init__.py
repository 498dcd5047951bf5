"""Releasing the rented machine at the end of a launch (ON_END / ON_BUDGET) through its provider's API."""
