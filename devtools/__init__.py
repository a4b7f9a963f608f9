"""Tools for developing batchmark, not part of it: in no wheel or image; the tests, the benchmarks and `make demo`
import or run them from the repository's root."""
