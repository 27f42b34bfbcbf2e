"""Measurements taken for a design before it is built (each module says which, and where its figures are quoted)."""
