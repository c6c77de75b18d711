"""The example plugin keeps slolab's policy contract and is found through its entry points."""

from slolab.heuristics.policies import policy_names
from slolab.testing import check_policy, contract_instances
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


def test_budget_is_the_declared_one():
    """The contract instances cap iterations at 512 tokens; the policy's own budget is 256."""
    (instance,) = contract_instances((0,))
    assert instance.cluster.max_batch_tokens == 512
    assert LeastSlackFirst(256).token_budget == 256
