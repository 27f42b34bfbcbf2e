"""What the dashboard reads, as typed records: each module turns one view's Redis reads into frozen records
(``snapshot``: a pipeline's state, windows, batches and online view; ``events``: the events of a range and a
player's look-up, each judged by the watermark in force; ``lanes``: the lab's lanes and what they record;
``online``: the online view's counts, history, minutes and peaks).
Nothing here writes to Redis or draws anything; the dashboard caches these reads (``dashboard/loaders.py``)."""
