"""The user's commands against a cluster: ``fetch`` (``batchmark results``), ``manifest`` (``batchmark manifest``).

They may use the runner's report code (reading, printing and writing a report); the controller may not.
"""
