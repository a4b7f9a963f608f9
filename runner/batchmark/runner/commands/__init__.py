"""The runner's commands, one module each; ``batchmark.runner.cli`` parses the command line and calls them."""
