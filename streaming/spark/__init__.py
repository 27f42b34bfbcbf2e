"""The Spark adapter: the Redis Stream data source, the query, the sink that commits each batch, the progress
listener, the checkpoint reader, shipping the code to a cluster.
"""
