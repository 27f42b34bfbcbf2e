"""What the stack benchmarks (``bench/stack.py``, ``bench/soak.py``, ``bench/pages.py``) share: the ``Procfile``'s
processes started in a scratch directory and their CPU and memory (``processes``), what is read from Redis and
``/metrics`` while they run (``readings``) and a run's result and tables (``results``); the soak's samples, its
report and its browser timing (``soak_sampling``, ``soak_report``, ``live_ops_timer``)."""
