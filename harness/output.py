"""The output flags every command shares: ``--json`` and ``--quiet``, declared once.

``--json`` prints one JSON document and nothing else on standard output; ``--quiet`` draws no
progress bar. A progress bar is drawn only when neither is given (:func:`wants_progress`), so
JSON output is never interleaved with a bar, whatever the command.
"""

from __future__ import annotations

import argparse

#: The help of ``--json`` when a command prints one object.
ONE_OBJECT = "print one JSON object"


def add_output_flags(
    p: argparse.ArgumentParser, json_help: str = ONE_OBJECT, quiet: bool = True
) -> None:
    """``--json`` (with the command's own description of what it prints) and, for a command
    that draws progress, ``--quiet``."""
    p.add_argument("--json", action="store_true", help=json_help)
    if quiet:
        p.add_argument("--quiet", action="store_true", help="no progress bar")


def wants_progress(args: argparse.Namespace) -> bool:
    """Whether a command draws its progress bar: neither ``--json`` nor ``--quiet`` given."""
    return not getattr(args, "json", False) and not getattr(args, "quiet", False)
