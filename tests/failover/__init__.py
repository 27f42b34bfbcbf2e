"""Redis failing over under Sentinel (decision 0023): a primary, a replica and three Sentinels, real processes on the
loopback; the commits' wait for replicas; a lost commit seen and said.
"""
