"""What a run will take: dataset sizes, the time and cost estimate, the MAX_HOURS budget check."""
