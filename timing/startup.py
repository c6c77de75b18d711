"""Start-up delays: how long a switched-on server needs before it serves, by weight source.

A server switched on pays from that moment but serves only once its weights are on the
device. Where they come from sets the delay:

``disk``   read from local NVMe storage (one drive per node, shared by the server's GPUs);
``host``   copied from host memory over each GPU's PCIe link (the weights were kept in RAM);
``d2d``    sent device to device from a running replica over each GPU's NVLink (HyperFlexis
           Sec. 6 "Fast Scaling"), or over PCIe peer-to-peer where the GPUs have no NVLink.

Derived presets (one per timing preset, same name) are transfer times: FP16 weight bytes
(``2 x parameters``) over the link's one-direction bandwidth, ``disk: bytes / disk_bw``,
``host: bytes / (gpus x pcie_bw)``, ``d2d: bytes / (gpus x link_bw)`` (tensor-parallel shards
load in parallel). They are lower bounds: framework start, allocation and format parsing come
on top. Measured presets (``hyperflexis-*``) are HyperFlexis's Table 2 wall times on Ascend
NPUs, and show how much larger real start-ups are (Qwen-7B: 4.14 s from disk against a
transfer bound of about 2 s).

Bandwidths, one direction:

- PCIe (PCI-SIG base specifications): ``lanes x rate x 128/130 / 8`` B/s; Gen3 8 GT/s, Gen4
  16 GT/s, Gen5 32 GT/s; x16 to a GPU: 15.75, 31.51, 63.02 GB/s; an NVMe drive on Gen4 x4:
  7.88 GB/s;
- NVLink (NVIDIA datasheets give the total of both directions): H100 / H200 SXM 900 GB/s,
  A100 SXM 600 GB/s, so 450 and 300 GB/s one way.

References
----------
HyperFlexis, Sec. 6 (Fast Scaling: device-to-device weight transfer) and Table 2 (scaling time
by weight source). PolyServe, Sec. 4.3 (moving a server between tiers keeps its weights and is
treated as instant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "WEIGHT_SOURCES",
    "StartupPreset",
    "available_startup_presets",
    "startup_delay_s",
    "startup_preset",
    "startup_table",
]

#: Where a switched-on server's weights come from.
WEIGHT_SOURCES = ("disk", "host", "d2d")


def pcie_bytes_per_s(gigatransfers_per_s: float, lanes: int) -> float:
    """One-direction PCIe bandwidth: ``lanes x rate x 128/130 / 8`` bytes per second."""
    return lanes * gigatransfers_per_s * 1e9 * 128 / 130 / 8


#: NVMe SSD on PCIe 4.0 x4 (the link's ceiling; a drive reads at most this fast).
NVME_GEN4_BYTES_PER_S = pcie_bytes_per_s(16, 4)
PCIE_GEN3_X16_BYTES_PER_S = pcie_bytes_per_s(8, 16)
PCIE_GEN4_X16_BYTES_PER_S = pcie_bytes_per_s(16, 16)
PCIE_GEN5_X16_BYTES_PER_S = pcie_bytes_per_s(32, 16)
#: NVLink 4 on H100 / H200 SXM: 900 GB/s both directions (datasheets).
NVLINK_H100_BYTES_PER_S = 450e9
#: NVLink 3 on A100 SXM: 600 GB/s both directions (datasheet).
NVLINK_A100_BYTES_PER_S = 300e9


@dataclass(frozen=True, slots=True)
class StartupPreset:
    """Start-up delay of a server by weight source, with where the figures come from.

    Attributes
    ----------
    name : str
        A timing preset's name (derived figures) or ``hyperflexis-*`` (measured).
    disk_s, host_s, d2d_s : float
        Seconds from switch-on to serving when the weights come from disk, host memory or
        another device.
    source : str
        Derivation or measurement.
    """

    name: str
    disk_s: float
    host_s: float
    d2d_s: float
    source: str

    def __post_init__(self) -> None:
        for field in ("disk_s", "host_s", "d2d_s"):
            value = getattr(self, field)
            if not 0 <= value < math.inf:
                raise ValueError(f"{field} must be a finite number >= 0, got {value} ({self.name})")

    def delay_s(self, source: str) -> float:
        """The delay for ``source`` (one of :data:`WEIGHT_SOURCES`)."""
        if source not in WEIGHT_SOURCES:
            raise ValueError(
                f"unknown weight source {source!r}; known: {', '.join(WEIGHT_SOURCES)}"
            )
        return float(getattr(self, f"{source}_s"))


def _derived(
    name: str,
    params: int,
    gpus: int,
    pcie_bytes_per_s_: float,
    d2d_bytes_per_s: float,
    hardware: str,
) -> StartupPreset:
    weight_bytes = 2.0 * params
    return StartupPreset(
        name,
        disk_s=weight_bytes / NVME_GEN4_BYTES_PER_S,
        host_s=weight_bytes / (gpus * pcie_bytes_per_s_),
        d2d_s=weight_bytes / (gpus * d2d_bytes_per_s),
        source=(
            f"Derived: {params:,} parameters in FP16 ({weight_bytes / 1e9:.2f} GB) on {hardware}; "
            "disk = NVMe on PCIe 4.0 x4 (7.88 GB/s), host = PCIe x16 per GPU, d2d as stated; "
            "transfer time only (a lower bound)"
        ),
    )


# Parameter counts from the models' configurations (embeddings included):
# Llama-2-7B 6,738,415,616; Llama-3.1-8B 8,030,261,248; OPT-6.7B 6,658,473,984;
# OPT-13B 12,853,473,280; OPT-30B 29,974,540,288; Qwen2.5-7B 7,615,616,512.
_PRESETS: dict[str, StartupPreset] = {
    p.name: p
    for p in (
        _derived(
            "llama2-7b-h100",
            6_738_415_616,
            1,
            PCIE_GEN5_X16_BYTES_PER_S,
            NVLINK_H100_BYTES_PER_S,
            "1 H100 SXM (PCIe 5.0 x16 63.0 GB/s; d2d NVLink 450 GB/s)",
        ),
        _derived(
            "llama3.1-8b-h200",
            8_030_261_248,
            1,
            PCIE_GEN5_X16_BYTES_PER_S,
            NVLINK_H100_BYTES_PER_S,
            "1 H200 SXM (PCIe 5.0 x16 63.0 GB/s; d2d NVLink 450 GB/s)",
        ),
        _derived(
            "opt-13b-a100-distserve",
            12_853_473_280,
            1,
            PCIE_GEN4_X16_BYTES_PER_S,
            NVLINK_A100_BYTES_PER_S,
            "1 A100 SXM (PCIe 4.0 x16 31.5 GB/s; d2d NVLink 300 GB/s)",
        ),
        _derived(
            "opt-13b-a100-hyperflexis",
            12_853_473_280,
            1,
            PCIE_GEN4_X16_BYTES_PER_S,
            NVLINK_A100_BYTES_PER_S,
            "1 A100 SXM (PCIe 4.0 x16 31.5 GB/s; d2d NVLink 300 GB/s)",
        ),
        _derived(
            "opt-13b-h100-slos",
            12_853_473_280,
            1,
            PCIE_GEN5_X16_BYTES_PER_S,
            NVLINK_H100_BYTES_PER_S,
            "1 H100 SXM (PCIe 5.0 x16 63.0 GB/s; d2d NVLink 450 GB/s)",
        ),
        _derived(
            "opt-6.7b-a100-slos",
            6_658_473_984,
            1,
            PCIE_GEN4_X16_BYTES_PER_S,
            NVLINK_A100_BYTES_PER_S,
            "1 A100 SXM (PCIe 4.0 x16 31.5 GB/s; d2d NVLink 300 GB/s)",
        ),
        _derived(
            "opt-30b-4gpu-slos",
            29_974_540_288,
            4,
            PCIE_GEN4_X16_BYTES_PER_S,
            NVLINK_A100_BYTES_PER_S,
            "4 A100 SXM, tensor parallel (SLOs-Serve Sec. 6; PCIe 4.0 x16 31.5 GB/s and "
            "NVLink 300 GB/s per GPU)",
        ),
        _derived(
            "sa-qwen2.5-7b-v100",
            7_615_616_512,
            2,
            PCIE_GEN3_X16_BYTES_PER_S,
            PCIE_GEN3_X16_BYTES_PER_S,
            "2 V100 on PCIe 3.0 x16, no NVLink (SA-ordering paper Sec. 5.1; d2d over PCIe "
            "peer-to-peer, 15.75 GB/s per GPU)",
        ),
        StartupPreset(
            "hyperflexis-qwen7b-ascend",
            disk_s=4.14,
            host_s=2.73,
            d2d_s=0.89,
            source="Measured: HyperFlexis Table 2, Qwen-7B (TP 1) on Ascend NPUs, mean of 3 runs",
        ),
        StartupPreset(
            "hyperflexis-qwen32b-ascend",
            disk_s=28.84,
            host_s=19.41,
            d2d_s=2.05,
            source="Measured: HyperFlexis Table 2, Qwen-32B (TP 2) on Ascend NPUs, mean of 3 runs",
        ),
        StartupPreset(
            "hyperflexis-llama70b-ascend",
            disk_s=22.58,
            host_s=11.50,
            d2d_s=1.16,
            source=(
                "Measured: HyperFlexis Table 2, Llama-70B (TP 8) on Ascend NPUs, mean of 3 runs"
            ),
        ),
    )
}


#: Host link and GPU-to-GPU link per GPU type of the generated presets (``MODEL/GPU/tpN``).
_GENERATED_LINKS: dict[str, tuple[float, float, str]] = {
    "h100": (
        PCIE_GEN5_X16_BYTES_PER_S,
        NVLINK_H100_BYTES_PER_S,
        "H100 SXM (PCIe 5.0 x16 63.0 GB/s; d2d NVLink 450 GB/s)",
    ),
    "a100": (
        PCIE_GEN4_X16_BYTES_PER_S,
        NVLINK_A100_BYTES_PER_S,
        "A100 SXM (PCIe 4.0 x16 31.5 GB/s; d2d NVLink 300 GB/s)",
    ),
    "a40": (
        PCIE_GEN4_X16_BYTES_PER_S,
        PCIE_GEN4_X16_BYTES_PER_S,
        "A40 (PCIe 4.0 x16 31.5 GB/s; d2d over PCIe peer-to-peer)",
    ),
}


def _register_generated() -> None:
    """Start-up presets of the timing presets generated from the Vidur table (and their
    calibrated variants, which load the same weights): the same transfer-time derivation,
    from the FP16 weights the KV arithmetic uses."""
    from slolab.timing.generated import WEIGHT_BYTES, generated_preset, generated_preset_names

    for name in generated_preset_names():
        if name in _PRESETS:
            continue
        info = generated_preset(name)
        host, d2d, hardware = _GENERATED_LINKS[info.gpu]
        params = round(info.weight_bytes / WEIGHT_BYTES)
        _PRESETS[name] = _derived(name, params, info.tp, host, d2d, f"{info.tp} {hardware}")
    from slolab.timing.overheads import CALIBRATED_SUFFIX, calibrated_preset_names

    for name in calibrated_preset_names():
        if name not in _PRESETS:
            info = generated_preset(name.removesuffix(CALIBRATED_SUFFIX))
            host, d2d, hardware = _GENERATED_LINKS[info.gpu]
            params = round(info.weight_bytes / WEIGHT_BYTES)
            _PRESETS[name] = _derived(name, params, info.tp, host, d2d, f"{info.tp} {hardware}")


def available_startup_presets() -> list[str]:
    """Names of the start-up presets, sorted."""
    _register_generated()
    return sorted(_PRESETS)


def startup_preset(name: str) -> StartupPreset:
    """The start-up preset ``name`` (a timing preset's name, or ``hyperflexis-*``)."""
    if name not in available_startup_presets():
        raise ValueError(
            f"no start-up preset {name!r}; known: {', '.join(available_startup_presets())}"
        )
    return _PRESETS[name]


def startup_delay_s(name: str, source: str) -> float:
    """Seconds from switch-on to serving for preset ``name`` loading weights from ``source``.

    Parameters
    ----------
    name : str
        A timing preset's name (the derived transfer time of its model and GPUs) or a
        measured ``hyperflexis-*`` preset.
    source : str
        ``"disk"``, ``"host"`` or ``"d2d"``.
    """
    return startup_preset(name).delay_s(source)


def startup_table() -> list[dict[str, Any]]:
    """One record per start-up preset: name, the three delays (s), source."""
    return [
        {
            "name": p.name,
            "disk_s": p.disk_s,
            "host_s": p.host_s,
            "d2d_s": p.d2d_s,
            "source": p.source,
        }
        for p in (_PRESETS[n] for n in available_startup_presets())
    ]
