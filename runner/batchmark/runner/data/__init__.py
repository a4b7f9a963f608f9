"""The requests a benchmark sends: synthetic lengths, or the user's own prompts read as a stream."""
