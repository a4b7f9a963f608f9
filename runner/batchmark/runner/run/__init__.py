"""One run in the main process: the load profile, the sweep and its search, the records folded as they
arrive, and the events its observers hear."""
