"""The online view's fold, pure (no Redis, no I/O): ``table`` (the player table and one batch's events), ``decide``
(each server's players and clock after a batch), ``groups`` (the groups of servers it is folded by, decision 0020).
The store writes what it decides (:mod:`streaming.store.online`)."""
