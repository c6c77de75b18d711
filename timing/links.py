"""Links a disaggregated cluster moves KV caches over, prefill server to decode server.

A figure is one direction's bandwidth per GPU in bytes per second. A server of ``tp`` GPUs
holds its KV cache in ``tp`` shards (tensor parallelism splits the attention heads), each GPU
sends its own shard over its own link, so one server's link carries ``tp`` times the figure
(:func:`server_link_bytes_per_s`). The engine queues the transfers leaving one prefill server
on that link, one at a time (``Cluster.kv_transfer_queued``).

======================  ============  =======================================================
link                    GB/s per GPU  source
======================  ============  =======================================================
``nvlink``              450 (H100,    NVIDIA H100 SXM / A100 SXM datasheets: NVLink 900 and
                        H200), 300    600 GB/s both directions per GPU; within one node only
                        (A100)
``infiniband-ndr``      50            NDR 400 Gb/s per port, one ConnectX-7 per GPU (NVIDIA
                                      DGX H100 datasheet: 8 x 400 Gb/s compute ports)
``infiniband-hdr``      25            HDR 200 Gb/s per port, one ConnectX-6 per GPU (NVIDIA
                                      DGX A100 datasheet: 8 x 200 Gb/s compute ports)
``ethernet-100g``       12.5          100 Gb/s Ethernet, one port per GPU
``ethernet-25g``        3.125         25 Gb/s Ethernet per GPU (the cross-node bandwidth
                                      DistServe's placement for slow clusters assumes)
======================  ============  =======================================================

The figures are line rates: protocol overheads, congestion on a shared fabric and the decode
side's own ingress (several prefill servers sending to one decode server) are not modelled.

References
----------
Zhong et al., "DistServe: Disaggregating Prefill and Decoding for Goodput-optimized Large
Language Model Serving", OSDI 2024, Sec. 4.2 (placement for low node-affinity clusters, KV
transfer over NVLink within a node). Patel et al., "Splitwise: Efficient Generative LLM
Inference Using Phase Splitting", ISCA 2024, Sec. 4.3 (KV transfer over InfiniBand, per-layer).
"""

from __future__ import annotations

import math

__all__ = ["KV_LINKS", "NVLINK_BYTES_PER_S", "gpu_link_bytes_per_s", "server_link_bytes_per_s"]

#: NVLink one direction per GPU, by GPU (NVIDIA datasheets: the total of both directions / 2).
NVLINK_BYTES_PER_S = {"h100": 450e9, "h200": 450e9, "a100": 300e9}

#: Links between nodes: one direction per GPU (one port per GPU).
KV_LINKS = {
    "infiniband-ndr": 50e9,
    "infiniband-hdr": 25e9,
    "ethernet-100g": 12.5e9,
    "ethernet-25g": 3.125e9,
}


def gpu_link_bytes_per_s(link: str | float, gpu: str) -> float:
    """One GPU's link bandwidth (bytes/s): ``link`` a name of :data:`KV_LINKS`, ``nvlink``, or
    a number of GB/s per GPU (a string such as ``"40"`` too).

    Raises
    ------
    ValueError
        One line: an unknown link (naming the known ones), a bandwidth <= 0, or NVLink on a
        GPU without it.
    """
    if isinstance(link, str) and link == "nvlink":
        if gpu not in NVLINK_BYTES_PER_S:
            raise ValueError(
                f"no NVLink figure for GPU {gpu!r} (known: {', '.join(NVLINK_BYTES_PER_S)}); "
                "give an InfiniBand or Ethernet link"
            )
        return NVLINK_BYTES_PER_S[gpu]
    if isinstance(link, str) and link in KV_LINKS:
        return KV_LINKS[link]
    try:
        gbps = float(link)
    except ValueError:
        raise ValueError(
            f"unknown KV link {link!r}; known: nvlink, {', '.join(KV_LINKS)}, or GB/s per GPU"
        ) from None
    if not (math.isfinite(gbps) and gbps > 0):
        raise ValueError(f"the KV link bandwidth must be > 0 GB/s per GPU, got {link!r}")
    return gbps * 1e9


def server_link_bytes_per_s(link: str | float, gpu: str, tp: int) -> float:
    """One server's link: ``tp`` GPUs, each sending its shard of the KV cache over its own
    link (:func:`gpu_link_bytes_per_s`)."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    return tp * gpu_link_bytes_per_s(link, gpu)
