"""The example plugin keeps slolab's policy contract and is found through its entry points."""

from slolab.heuristics.policies import policy_names
from slolab.testing import check_policy
from slolab_lsf import LeastSlackFirst


def test_least_slack_keeps_the_policy_contract():
    """Six seeded random instances of 60 requests: checker-clean, every request finished or
    rejected, no iteration above the 256-token budget it declares."""
    found = check_policy(lambda instance: LeastSlackFirst(256), seeds=range(6), n_requests=60)
    assert found == [], "\n".join(map(str, found))


def test_installed_plugin_is_listed_and_checked_by_name():
    """Installed, the policy is registered as least-slack and passes the check by that name."""
    assert "least-slack" in policy_names()
    assert check_policy("least-slack", seeds=(0,)) == []


def test_least_slack_keeps_the_contract_when_overloaded():
    """200 requests at 20 req/s on one server (far more than it serves): memory never runs out
    and nothing is left unfinished."""
    found = check_policy("least-slack", seeds=(0, 1), n_requests=200, servers=1)
    assert found == [], "\n".join(map(str, found[:5]))
