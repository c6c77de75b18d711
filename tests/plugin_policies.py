"""Policies of a researcher's own file (written to a test's folder, outside the package):
one whose ``next_batch`` raises, one that never schedules anything."""

import importlib
import sys
import textwrap

SOURCE = textwrap.dedent(
    '''
    from slolab.sim import Batch


    class Boom:
        """Raises in next_batch."""

        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            raise ValueError("my bug")


    class Empty:
        """Returns an empty batch forever."""

        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            return Batch()


    class Interrupted:
        """Raises KeyboardInterrupt in next_batch."""

        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            raise KeyboardInterrupt


    class NotABatch:
        """Returns a number instead of a Batch."""

        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            return 42


    class BadRouter:
        """Fails on the third request it routes."""

        def start(self, instance, seed):
            pass

        def route(self, request, servers, now):
            if request == 2:
                raise KeyError("no such tier")
            return 0


    class BadScaler:
        """Fails at its tick at 1 s."""

        interval_s = 0.5

        def start(self, instance, seed):
            pass

        def decide(self, cluster):
            if cluster.now == 1.0:
                raise ZeroDivisionError("division by zero")
            return ()
    '''
)
#: Line of ``raise ValueError("my bug")`` in :data:`SOURCE` (1-based), and of the router's
#: and the scaler's raise.
BOOM_LINE = SOURCE.splitlines().index('        raise ValueError("my bug")') + 1
ROUTER_LINE = SOURCE.splitlines().index('            raise KeyError("no such tier")') + 1
SCALER_LINE = (
    SOURCE.splitlines().index('            raise ZeroDivisionError("division by zero")') + 1
)


def write_policies(folder, monkeypatch, module="mine"):
    """Write :data:`SOURCE` as ``folder/<module>.py``, put ``folder`` first on ``sys.path``
    and make it the working directory; returns the imported module."""
    path = folder / f"{module}.py"
    path.write_text(SOURCE)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, module, raising=False)
    importlib.invalidate_caches()
    return importlib.import_module(module)
