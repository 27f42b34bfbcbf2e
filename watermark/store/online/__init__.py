"""The online view folded by processes of their own, one per group of servers (decision 0020)."""
