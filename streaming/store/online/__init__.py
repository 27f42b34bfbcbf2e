"""The online view's store: ``commit`` (a group's fold of a batch written once; the job's mirror of the players),
``merge`` (the groups' parts merged into the view), ``handoff`` and ``runner`` (the view folded by processes of
their own, one per group of servers: decision 0020). The fold itself is pure: :mod:`streaming.rules.online`."""
