"""Exact formulations, one module per paper problem (importing registers them)."""

from slolab.models import sa_ordering, slos_admission

__all__ = ["sa_ordering", "slos_admission"]
