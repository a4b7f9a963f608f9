"""Tools for developing batchmark that are not part of it: never packaged, never imported by runner/ or operator/."""
