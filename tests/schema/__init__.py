"""The schema's rules as tables, without Redis or Spark (the shards so far; the older schema tests live in
``tests/rules``).
"""
