"""The results store: runs kept beyond the run, in a layout a person can browse, with an index that queries read
without opening every run."""
