"""The online view's rules as tables: the batch fold, each server's decisions, the commit's and the merge's."""
