"""The rules, pure (no Spark, no Redis, no I/O): window math and the late rule, watermarks, presence, idleness, the
late-event record, the delay trade-off, each event judged.
"""
