"""The results store: runs kept beyond the run, in a folder or an S3-compatible bucket, in a layout a person can
browse, with an index that queries read without opening every run. ``open_store(location)`` gives one."""
