"""`pglab compare`: runs against runs, with honest statistics (see comparison.py)."""
