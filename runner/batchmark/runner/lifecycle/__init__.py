"""How the runner's processes start and end: the start method, signals, the shutdown bound, exit codes in words."""
