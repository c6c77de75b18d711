"""Error messages that suggest an option, worded for Python callers or for the command line.

A message that tells the user what to pass ("pass zero_output='drop' or 'clamp'") names a
keyword argument in Python and a flag on the command line ("pass --zero-output drop or
clamp"). Such a message is written once, as parts: plain text and :class:`Suggestion`
records; :func:`worded` renders both forms. Errors built this way carry the command-line form
in a ``cli_message`` attribute, which ``slolab``'s ``main()`` prints instead of ``str(exc)``.
Every suggested keyword is spelled as its flag with ``_`` as ``-`` (``max_request_tokens`` is
``--max-request-tokens``), the rule the command line follows for these options.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Suggestion:
    """An option to pass, with the values worth trying (none: any value).

    Parameters
    ----------
    option : str
        The keyword argument (``"zero_output"``).
    values : tuple of str
        Values to suggest (``("drop", "clamp")``).
    """

    option: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.option.isidentifier():
            raise ValueError(f"option must be an identifier, got {self.option!r}")

    @property
    def keyword(self) -> str:
        """Python form: ``zero_output='drop' or 'clamp'`` (``max_request_tokens=`` bare)."""
        return f"{self.option}=" + " or ".join(repr(v) for v in self.values)

    @property
    def flag(self) -> str:
        """Command-line form: ``--zero-output drop or clamp`` (``--max-request-tokens`` bare)."""
        name = "--" + self.option.replace("_", "-")
        return f"{name} {' or '.join(self.values)}" if self.values else name


def worded(*parts: str | Suggestion) -> tuple[str, str]:
    """The message made of ``parts`` for Python and for the command line."""
    python = "".join(p.keyword if isinstance(p, Suggestion) else p for p in parts)
    cli = "".join(p.flag if isinstance(p, Suggestion) else p for p in parts)
    return python, cli


class SuggestingError(ValueError):
    """A ValueError whose message suggests options; ``cli_message`` words them as flags."""

    def __init__(self, *parts: str | Suggestion) -> None:
        python, cli = worded(*parts)
        super().__init__(python)
        self.cli_message = cli


def cli_message(exc: BaseException) -> str:
    """What the command line prints for ``exc``: its ``cli_message`` if it has one."""
    message = getattr(exc, "cli_message", None)
    if isinstance(message, str):
        return message
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)
