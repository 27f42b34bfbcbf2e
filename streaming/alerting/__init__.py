"""The alerts' rules, pure (no Redis, no Spark, no I/O): the thresholds file (``config``), what one round
observes (``observation``), the conditions (``conditions``), the lifecycle from finding to firing and resolved
(``lifecycle``), the webhook's message (``webhook``) and the same rules for Prometheus (``promrules``).
"""
