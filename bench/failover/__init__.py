"""Redis failing over under the whole stack (``python -m bench.failover``: its ``__main__``)."""
