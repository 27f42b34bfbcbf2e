"""Benchmarks: the whole stack (``bench.stack``, console script ``wm-bench``) and its parts."""
