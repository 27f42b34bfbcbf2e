"""The Redis adapter: the guarded per-batch commits, the online view's store, the reports, connections with retry,
the embedded redis-server.
"""
