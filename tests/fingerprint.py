"""Identity fingerprints that compare what code decides, not the floating-point path it took.

An identity check (the engine split, the heuristics split, the searches' driver, the column
generation) asks "does this code decide as the recorded code did?". Hashing the bytes of every
float answers a narrower question, "did this processor round every operation as the recording
one did?", and the answer changes with the CPU's vector width, the BLAS kernel numpy picks and
the LP solver's pivoting: a test recorded on one x86-64 processor then fails on another although
no decision moved (docs/architecture.md, "Identity checks").

A :class:`Fingerprint` splits a value into two parts:

- ``decisions``: a hash of everything that is not a float, bit for bit: integers, booleans,
  strings, the shape and dtype of every array and where its floats are NaN or infinite (which
  tokens were produced, which requests were rejected). A changed decision changes it.
- ``figures``: the floats, summarised per float array (and per float scalar) as their sum, an
  index-weighted sum and the sum of their magnitudes. They are compared within :data:`REL` of
  the magnitudes, so a last-bit difference passes and a moved time or objective (a decision's
  consequence) does not.

``tests/test_fingerprint.py`` shows the rule: the fingerprint of a real engine run is unchanged
when every float is perturbed in its last bits and changes when one decision changes.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

#: Relative tolerance of the float figures, against the magnitudes of the floats compared. The
#: four arithmetic operations round the same on every x86-64 processor; what differs between
#: processors is the rest: transcendental functions and reductions in numpy's vector kernels,
#: BLAS dot products, an LP solver's pivoting. Each differs by a few units in the last place
#: (1e-16 relative); an engine run that accumulates thousands of durations drifts by 1e-13 or so.
#: A moved decision moves a time by microseconds (1e-6 s) or more.
REL = 1e-10

#: Significant digits of recorded figures (enough that recording loses nothing against REL).
DIGITS = 15


def _rounded(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


@dataclasses.dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a value decided (``decisions``, exact) and its floats in summary (``figures``: per
    float array, and per float scalar, its sum, index-weighted sum and sum of magnitudes)."""

    decisions: str
    figures: tuple[tuple[float, float, float], ...]

    def record(self) -> list:
        """A literal to store (JSON or Python): [decisions, [[sum, weighted, magnitude], ...]],
        a part written as one number ``x`` where its figures are ``(x, x, |x|)`` (a scalar)."""
        leaves: list = []
        for leaf in self.figures:
            total, weighted, magnitude = (_rounded(x) for x in leaf)
            scalar = total == weighted and magnitude == abs(total)
            leaves.append(total if scalar else [total, weighted, magnitude])
        return [self.decisions, leaves]

    def differences(self, recorded, rel: float = REL) -> list[str]:
        """What differs from a :meth:`record`: empty when the decisions are the same and every
        figure is within ``rel`` of its magnitude."""
        decisions, leaves = recorded
        figures = [(x, x, abs(x)) if isinstance(x, (int, float)) else x for x in leaves]
        found = []
        if self.decisions != decisions:
            found.append(f"decisions {self.decisions} != {decisions}")
        if len(self.figures) != len(figures):
            return [*found, f"{len(self.figures)} float parts != {len(figures)}"]
        for i, (mine, theirs) in enumerate(zip(self.figures, figures, strict=True)):
            scale = max(mine[2], theirs[2])
            for name, a, b in zip(("sum", "weighted sum", "magnitude"), mine, theirs, strict=True):
                if abs(a - b) > rel * scale:
                    found.append(f"float part {i}: {name} {a!r} != {b!r} (rel {rel} of {scale!r})")
        return found

    def matches(self, recorded, rel: float = REL) -> bool:
        """Whether :meth:`differences` is empty."""
        return not self.differences(recorded, rel)


class _Walker:
    """Walks a value depth first: non-float parts go to a hash, floats to a list."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.floats: list[np.ndarray] = []

    def token(self, text: str) -> None:
        self.hash.update(text.encode())
        self.hash.update(b"\x00")

    def walk(self, value: Any) -> None:
        if value is None or isinstance(value, (bool, np.bool_)):
            self.token(repr(bool(value)) if value is not None else "None")
        elif isinstance(value, enum.Enum):
            self.token(f"{type(value).__name__}.{value.name}")
        elif isinstance(value, (int, np.integer)):
            self.token(f"i{int(value)}")
        elif isinstance(value, (float, np.floating)):
            self.float_array(np.asarray([value], dtype=np.float64), "f")
        elif isinstance(value, str):
            self.token(f"s{value}")
        elif isinstance(value, np.ndarray):
            self.array(value)
        elif isinstance(value, dict):
            self.token(f"dict{len(value)}")
            for key in sorted(value, key=repr):
                self.walk(key)
                self.walk(value[key])
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            self.token(type(value).__name__)
            for field in dataclasses.fields(value):
                self.token(field.name)
                self.walk(getattr(value, field.name))
        elif isinstance(value, (list, tuple, set, frozenset)):
            items: Iterable = (
                sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
            )
            items = list(items)
            self.token(f"{type(value).__name__}{len(items)}")
            for item in items:
                self.walk(item)
        else:
            raise TypeError(f"fingerprint: no rule for {type(value).__name__}: {value!r:.80}")

    def array(self, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value)
        if value.dtype.kind == "f":
            self.float_array(value, f"{value.dtype}{value.shape}")
        elif value.dtype.kind in "biu":
            self.token(f"{value.dtype}{value.shape}")
            self.hash.update(value.astype(np.int64).tobytes())
        elif value.dtype.kind == "O":
            self.token(f"object{value.shape}")
            for item in value.ravel():
                self.walk(item)
        else:
            self.token(f"{value.dtype}{value.shape}")
            self.hash.update(value.tobytes())

    def float_array(self, value: np.ndarray, label: str) -> None:
        flat = value.astype(np.float64).ravel()
        finite = np.isfinite(flat)
        # where the floats are NaN (a token never produced) or infinite is a decision
        kind = np.where(finite, 0, np.where(np.isnan(flat), 1, np.sign(flat) + 2)).astype(np.int8)
        self.token(label)
        self.hash.update(kind.tobytes())
        self.floats.append(flat[finite])


def _figures(floats: np.ndarray) -> tuple[float, float, float]:
    # a weight per position, so that two floats trading places moves the weighted sum
    weights = 1.0 + (np.arange(floats.size) % 101) / 101.0
    return (
        math.fsum(floats.tolist()),
        math.fsum((floats * weights).tolist()),
        math.fsum(np.abs(floats).tolist()),
    )


def fingerprint(*parts: Any) -> Fingerprint:
    """The :class:`Fingerprint` of ``parts`` (arrays, numbers, strings, containers and
    dataclasses of them, in any nesting)."""
    walker = _Walker()
    walker.walk(parts)
    return Fingerprint(
        walker.hash.hexdigest()[:16], tuple(_figures(leaf) for leaf in walker.floats)
    )


def schedule_parts(schedule) -> tuple:
    """A :class:`~slolab.sim.schedule.Schedule` as fingerprint parts: every iteration's entries
    per server (decisions), the iterations' earliest starts as one float array per server, the
    rejected requests and the scaling plan."""
    entries = tuple(tuple(it.entries for it in server) for server in schedule.iterations)
    starts = [np.array([it.not_before_s for it in server]) for server in schedule.iterations]
    return entries, starts, sorted(schedule.rejected), schedule.plan


def assert_matches(found: Fingerprint, recorded, what: str, rel: float = REL) -> None:
    """Fail naming ``what`` and each difference when ``found`` differs from ``recorded``."""
    differences = found.differences(recorded, rel)
    assert not differences, f"{what}: " + "; ".join(differences) + f"; now {found.record()!r}"


def recording_path(test_file: str) -> Path:
    """The JSON file beside ``test_file`` that holds its battery's records."""
    return Path(test_file).with_suffix(".json")


def load_recording(test_file: str) -> dict:
    """The records of ``test_file``'s battery (case -> record, or an error's text); empty
    before the first recording (every case then fails as unrecorded)."""
    path = recording_path(test_file)
    return json.loads(path.read_text()) if path.exists() else {}


def write_recording(test_file: str, records: dict) -> None:
    """Write ``records`` (case -> :meth:`Fingerprint.record` or text) beside ``test_file``."""
    text = json.dumps(dict(sorted(records.items())), indent=1) + "\n"
    recording_path(test_file).write_text(text)


def assert_case(found, recorded, what: str, rel: float = REL) -> None:
    """A battery case: texts (an error's type and message) equal, fingerprints match."""
    if isinstance(found, Fingerprint):
        assert not isinstance(recorded, str), f"{what}: recorded {recorded!r}, now a run"
        assert_matches(found, recorded, what, rel)
    else:
        assert found == recorded, f"{what}: {found!r} != {recorded!r}"


# -- the results guard's tolerance (tests/results/conftest.py) ---------------------------------

#: One unit of the 6th decimal (ratios, attainments), with room for the stored value's decimal
#: representation.
ABS_UNIT = 1.01e-6
#: One unit of the 9th significant digit is at most 1e-8 of the value.
REL_UNIT = 1.01e-8


def within_rounding(found, stored) -> bool:
    """Whether ``found`` equals ``stored`` or, both being non-integral numbers, is within one
    unit of the stored figure's last digit."""
    if found == stored:
        return True
    numbers = (float,)
    if not (isinstance(found, numbers) and isinstance(stored, numbers)):
        return False
    if math.isnan(found) and math.isnan(stored):
        return True
    return abs(found - stored) <= max(ABS_UNIT, REL_UNIT * abs(stored))
