"""Prefix caching is on by default where a trace carries block ids, and off otherwise."""

import pytest
from slolab.harness.cli import build_parser
from slolab.harness.serving import ServingSetup
from slolab.problems.registry import OptionValueError
from slolab.problems.serving import prefix_block_tokens, serving_instance
from slolab.problems.tier_partition import polyserve_instance


def test_prefix_cache_defaults_to_auto_on_every_serving_command():
    """simulate, capacity and plan parse --prefix-cache as auto when it is not given."""
    parser = build_parser()
    for command in ("simulate", "capacity", "plan"):
        assert parser.parse_args([command, "mooncake_conversation"]).prefix_cache == "auto"
    assert ServingSetup("mooncake_conversation").prefix_cache == "auto"


def test_mooncake_caches_512_token_blocks_unless_turned_off():
    """A Mooncake cut keeps its hash_ids and caches 512-token blocks by default; off: neither."""
    default = ServingSetup("mooncake_conversation", limit=20).instance(1.0)
    # one id per started 512-token block: the first prompt's 6,758 tokens carry 14 ids
    assert default.cluster.prefix_block_tokens == 512
    assert int(default.workload.prompt_tokens[0]) == 6758
    assert len(default.workload["hash_ids"][0]) == 14
    off = ServingSetup("mooncake_conversation", limit=20, prefix_cache="off").instance(1.0)
    assert off.cluster.prefix_block_tokens == 0 and "hash_ids" not in off.workload
    library = serving_instance("mooncake_conversation", seed=0, limit=20)
    assert library.cluster.prefix_block_tokens == 512


def test_a_trace_without_block_ids_is_unaffected():
    """Azure conv has no block ids: auto is off, and a block size is refused."""
    assert ServingSetup("azure_conv_2023", limit=20).instance().cluster.prefix_block_tokens == 0
    assert prefix_block_tokens("auto", has_block_ids=False) == 0
    with pytest.raises(OptionValueError, match="needs a trace with prompt block ids"):
        prefix_block_tokens("16", has_block_ids=False)


def test_exact_model_builders_keep_caching_off_on_mooncake():
    """The tier partition's instance charges every prompt token: no cache, no block ids."""
    inst = polyserve_instance("mooncake_conversation", seed=0, servers=2, limit=20)
    assert inst.cluster.prefix_block_tokens == 0 and "hash_ids" not in inst.workload
