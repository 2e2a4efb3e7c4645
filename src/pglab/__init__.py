"""pglab: a reproducible performance lab for PostgreSQL."""

__version__ = "0.1.0"
