"""KV link figures per GPU and per server (slolab.timing.links)."""

import pytest
from slolab.timing.links import gpu_link_bytes_per_s, server_link_bytes_per_s


def test_named_links_per_gpu_and_per_server():
    """NDR InfiniBand is 50 GB/s per GPU, so a TP 4 server sends 200 GB/s."""
    # 400 Gb/s / 8 = 50 GB/s per port, one port per GPU; 4 GPUs -> 4 x 50 = 200 GB/s
    assert gpu_link_bytes_per_s("infiniband-ndr", "h100") == 50e9
    assert server_link_bytes_per_s("infiniband-ndr", "h100", 4) == 200e9
    # NVLink one way: H100 900 / 2 = 450 GB/s, A100 600 / 2 = 300 GB/s
    assert gpu_link_bytes_per_s("nvlink", "h100") == 450e9
    assert server_link_bytes_per_s("nvlink", "a100", 2) == 600e9


def test_a_number_is_gb_per_s_per_gpu():
    """'40' is 40 GB/s per GPU: 80 GB/s for a TP 2 server."""
    # 2 x 40e9 = 80e9
    assert server_link_bytes_per_s("40", "a40", 2) == 80e9


@pytest.mark.parametrize("link", ["0", "-5", "nan"])
def test_non_positive_bandwidth_is_one_line(link):
    """A bandwidth of 0, negative or NaN is refused naming the value."""
    with pytest.raises(ValueError, match="must be > 0 GB/s per GPU"):
        gpu_link_bytes_per_s(link, "h100")


def test_unknown_link_and_nvlink_without_nvlink():
    """An unknown name lists the known ones; NVLink on an A40 is refused."""
    with pytest.raises(ValueError, match="known: nvlink, infiniband-ndr"):
        gpu_link_bytes_per_s("token-ring", "h100")
    with pytest.raises(ValueError, match="no NVLink figure for GPU 'a40'"):
        gpu_link_bytes_per_s("nvlink", "a40")
