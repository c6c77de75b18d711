"""Suite-wide set-up."""

import signal


def pytest_configure(config):
    """Ctrl-C reaches the tests that send it, however the suite was started.

    A suite started in the background by a non-interactive shell (``pytest ... &`` in a script,
    some CI runners) inherits SIGINT ignored; Python then installs no KeyboardInterrupt handler,
    and every process the suite starts inherits the ignored signal too. The Ctrl-C tests
    (tests/solvers/test_interrupt.py, tests/harness/test_cli_interrupt.py) would then fail on
    how the suite was launched, not on the code. Python's own handler put back here makes this
    process interruptible, and children start with SIGINT at its default again (exec resets a
    caught signal, never an ignored one).
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
