"""A batch of the pipeline (or a lane) and the plan of its commit: pure, written by :mod:`streaming.store.commit`."""
