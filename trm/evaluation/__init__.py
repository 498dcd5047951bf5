"""Evaluation: the generic pass over test batches, the ARC evaluator, voting and submissions."""
