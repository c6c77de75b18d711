"""An SLO scheme of the user's own that raises is named as a plugin: its function, the file and
line, and the scheme it ran as; slolab's own scheme errors keep their one-line form."""

import textwrap

import pytest
from slolab.instances.records import Workload
from slolab.instances.slos import SCHEMES, assign_slos, register_scheme
from slolab.plugins import PluginFailure

SOURCE = textwrap.dedent(
    """\
    def broken(workload, rng, timing):
        tiers = {"chat": 0}
        return {"tier": tiers["code"]}  # line 3
    """
)


WORKLOAD = Workload({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 7], "output_tokens": [2, 3]})


@pytest.fixture
def broken_scheme(tmp_path, monkeypatch):
    (tmp_path / "my_slos.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_slos

    register_scheme("my-broken", my_slos.broken)
    yield tmp_path / "my_slos.py"
    SCHEMES.pop("my-broken", None)


def test_a_plugin_scheme_that_raises_names_its_file_line_and_scheme(broken_scheme):
    wl = WORKLOAD
    with pytest.raises(PluginFailure) as info:
        assign_slos(wl, "my-broken", seed=0)
    assert str(info.value) == (
        f"SLO scheme my_slos:broken raised KeyError: 'code' at {broken_scheme}:3 in broken, "
        "assigning SLOs (--slos my-broken)"
    )
    assert isinstance(info.value.__cause__, KeyError)


def test_a_builtin_scheme_error_keeps_its_form():
    """slolab's own scheme raising (here: a timing-dependent scheme without timing) is not
    re-labelled as a plugin's."""
    wl = WORKLOAD
    with pytest.raises(Exception) as info:
        assign_slos(wl, "polyserve", seed=0)
    assert not isinstance(info.value, PluginFailure)
