"""The feature arithmetic of timing.base: one chunk's attention work as the array form's float."""

import numpy as np
from slolab.timing.base import prefill_attention_work, prefill_chunk_attention


def test_one_chunk_attention_is_the_array_forms_float():
    """prefill_chunk_attention(c, prefix) has the bits of prefill_attention_work(c, prefix)."""
    # 3 tokens after 4 in the cache attend to 5, 6 and 7 keys: 18
    assert prefill_chunk_attention(3, 4) == 18.0
    # an odd chunk after an odd prefix: 5 * (7 + 3) = 50; one token alone attends to itself: 1
    assert prefill_chunk_attention(5, 7) == 50.0
    assert prefill_chunk_attention(1, 0) == 1.0
    rng = np.random.default_rng(0)
    chunks = rng.integers(1, 200_000, 2_000)
    prefixes = rng.integers(0, 2_000_000, 2_000)
    arrays = prefill_attention_work(chunks, prefixes)
    pairs = zip(chunks.tolist(), prefixes.tolist(), strict=True)
    scalars = [prefill_chunk_attention(c, p) for c, p in pairs]
    assert np.array(scalars).tobytes() == np.asarray(arrays).tobytes()
