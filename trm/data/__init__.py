"""ARC data: shipped puzzles, the dataset builder, on-disk formats and the training data loader."""
