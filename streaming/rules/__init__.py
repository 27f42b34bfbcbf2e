"""The rules, pure (no Spark, no Redis, no I/O): window math and the late rule, watermarks, the online view, idleness,
the late-event record, the delay trade-off, each event judged.
"""
