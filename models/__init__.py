"""Exact formulations, one module per paper problem (importing registers them)."""

from slolab.models import slos_admission

__all__ = ["slos_admission"]
