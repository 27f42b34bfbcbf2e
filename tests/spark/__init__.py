"""The Spark adapters' own parts: the Redis Stream source (its batch cap, its shards) against a real redis-server,
and under a real SparkSession where Spark's offset log is what is tested.
"""
