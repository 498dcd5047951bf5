"""The versioned runbooks under runbooks/: parse, check, run the cpu blocks, stamp, measured figures, journeys."""
