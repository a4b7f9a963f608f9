"""What a run's results are and what is decided from them: the report's models, statistics, repeats,
budgets, cost, the recommendation, the summary, and the files they are written to."""
