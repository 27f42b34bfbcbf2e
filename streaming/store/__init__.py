"""The Redis adapter: the guarded per-batch commits, the online view's store, how a pipeline stands (the reads the
dashboard shares with other readers), the reports, connections with retry, the embedded redis-server.
"""
