"""The launch itself: the `Launch` that runs the plan's steps in order, each step carrying its action."""
