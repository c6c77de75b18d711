"""Transformer shapes, accelerators and the attention terms a roofline derives from them,
shared by the hand-written presets (:mod:`slolab.timing.presets`) and the generated ones
(:mod:`slolab.timing.generated`)."""

from __future__ import annotations

from dataclasses import dataclass

from slolab.timing.base import LinearTiming

__all__ = [
    "A100_80GB",
    "ATTENTION_FLOP_EFFICIENCY",
    "H100_SXM",
    "H200",
    "LLAMA2_7B",
    "LLAMA31_8B",
    "Accelerator",
    "TransformerShape",
    "attention_terms",
    "with_terms",
]

#: FlashAttention-2 reaches about 35 % of the H100's dense BF16 peak (FlashAttention-3 paper,
#: Shah et al. 2024, abstract); used for prefill attention on H100-class GPUs.
ATTENTION_FLOP_EFFICIENCY = 0.35


@dataclass(frozen=True, slots=True)
class TransformerShape:
    """The dimensions of a decoder-only transformer that set its attention costs.

    Attributes
    ----------
    name : str
        Model name.
    num_layers : int
        Transformer layers.
    hidden_size : int
        Model width (query heads times head dimension).
    num_kv_heads : int
        Key/value heads (fewer than query heads under grouped-query attention).
    head_dim : int
        Dimension of one head.
    non_embedding_params : float
        Parameters of the layers (projections and MLP), which set the GEMM FLOPs per token.
    kv_bytes_per_element : int
        Bytes of one cached K or V element (2 for FP16/BF16).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    non_embedding_params: float
    kv_bytes_per_element: int = 2

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "hidden_size",
            "num_kv_heads",
            "head_dim",
            "kv_bytes_per_element",
        ):
            value = getattr(self, field)
            if not value >= 1:
                raise ValueError(f"{field} must be >= 1, got {value} ({self.name})")
        if not self.non_embedding_params > 0:
            raise ValueError(
                f"non_embedding_params must be > 0, got {self.non_embedding_params} ({self.name})"
            )

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V cached per token: ``2 * layers * kv_heads * head_dim * bytes``."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_element

    @property
    def prefill_attention_flops_per_work(self) -> float:
        """FLOPs per (query, key) pair over all layers: ``4 * layers * hidden``.

        ``Q K^T`` costs ``2 * head_dim`` FLOPs per pair and head, ``A V`` as much again, over
        ``hidden / head_dim`` query heads.
        """
        return 4.0 * self.num_layers * self.hidden_size

    @property
    def gemm_flops_per_token(self) -> float:
        """FLOPs of the layer GEMMs per token: ``2 * non_embedding_params``."""
        return 2.0 * self.non_embedding_params


@dataclass(frozen=True, slots=True)
class Accelerator:
    """Peak rates of one GPU.

    Attributes
    ----------
    name : str
        GPU name.
    hbm_bytes_per_s : float
        Peak HBM bandwidth (B/s).
    peak_flops : float
        Dense FP16/BF16 tensor-core peak (FLOP/s).
    """

    name: str
    hbm_bytes_per_s: float
    peak_flops: float

    def __post_init__(self) -> None:
        for field in ("hbm_bytes_per_s", "peak_flops"):
            value = getattr(self, field)
            if not value > 0:
                raise ValueError(f"{field} must be > 0, got {value} ({self.name})")


#: Llama-2-7B: 32 layers, width 4096, 32 KV heads of 128 (no GQA), MLP 11008; layer
#: parameters ``32 * (4 * 4096^2 + 3 * 4096 * 11008)``.
LLAMA2_7B = TransformerShape("Llama-2-7B", 32, 4096, 32, 128, 32 * (4 * 4096**2 + 3 * 4096 * 11008))
#: Llama-3.1-8B: 32 layers, width 4096, 8 KV heads of 128 (GQA), MLP 14336; layer parameters
#: ``32 * (2 * 4096^2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)``.
LLAMA31_8B = TransformerShape(
    "Llama-3.1-8B", 32, 4096, 8, 128, 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
)
#: NVIDIA H100 SXM5 80GB: 3.35 TB/s HBM3, 989 TFLOP/s dense BF16 (datasheet).
H100_SXM = Accelerator("H100-SXM", 3.35e12, 989e12)
#: NVIDIA H200 141GB: 4.8 TB/s HBM3e, 989 TFLOP/s dense BF16 (datasheet; same compute as H100).
H200 = Accelerator("H200", 4.8e12, 989e12)
#: NVIDIA A100 80GB SXM: 2.039 TB/s HBM2e, 312 TFLOP/s dense BF16 (datasheet).
A100_80GB = Accelerator("A100-80GB", 2.039e12, 312e12)


def attention_terms(
    shape: TransformerShape,
    gpu: Accelerator,
    attention_flop_efficiency: float = ATTENTION_FLOP_EFFICIENCY,
    hbm_efficiency: float = 1.0,
) -> dict[str, float]:
    """Attention coefficients from the model shape and the GPU's peak rates.

    - Decode attention is bound by reading the KV cache: seconds per KV token
      ``= kv_bytes_per_token / (hbm_bytes_per_s * hbm_efficiency)``.
    - Prefill attention is bound by compute: seconds per unit of ``prefill_attention_work``
      (one query-key pair in every layer) ``= 4 * layers * hidden / (peak_flops *
      attention_flop_efficiency)``.

    Parameters
    ----------
    shape : TransformerShape
        Model dimensions.
    gpu : Accelerator
        Peak rates.
    attention_flop_efficiency : float
        Fraction of the peak FLOP/s the prefill attention kernel reaches (0.35 by default:
        FlashAttention-2 on H100).
    hbm_efficiency : float
        Fraction of the peak bandwidth decode attention reaches (1.0 by default: the KV read
        time is a lower bound).

    Returns
    -------
    dict
        ``{"decode_kv_tokens": s per KV token, "prefill_attention_work": s per pair}``.
    """
    for label, value in (
        ("attention_flop_efficiency", attention_flop_efficiency),
        ("hbm_efficiency", hbm_efficiency),
    ):
        if not 0 < value <= 1:
            raise ValueError(f"{label} must be in (0, 1], got {value}")
    return {
        "decode_kv_tokens": shape.kv_bytes_per_token / (gpu.hbm_bytes_per_s * hbm_efficiency),
        "prefill_attention_work": shape.prefill_attention_flops_per_work
        / (gpu.peak_flops * attention_flop_efficiency),
    }


def with_terms(line: LinearTiming, terms: dict[str, float], name: str) -> LinearTiming:
    coefficients = line.coefficients
    for feature, value in terms.items():
        coefficients[feature] = coefficients.get(feature, 0.0) + value
    return LinearTiming(line.intercept_s, coefficients, name=name)
