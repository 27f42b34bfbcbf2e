"""What the stack benchmarks (``bench/stack.py``, ``bench/soak.py``, ``bench/pages.py``) share: the ``Procfile``'s
processes started in a scratch directory and their CPU and memory (``processes``), and what is read from Redis and
``/metrics`` while they run (``readings``)."""
