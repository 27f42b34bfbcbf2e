"""The job with a real SparkSession: the pipeline against the oracle, exactly once under SIGKILL, faults, lanes, a
cluster, the stop.
"""
