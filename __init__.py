"""slolab: exact models, faithful heuristics and one token-level engine for multi-SLO LLM serving."""

__version__ = "0.1.0"
