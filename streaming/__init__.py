"""Real-time watermark pipeline: Redis Stream -> PySpark -> Redis.

Modules the dashboard imports (``config``, ``keys``, ``windows``, ``timeutil``,
``events``, ``report``) must not import pyspark.
"""
