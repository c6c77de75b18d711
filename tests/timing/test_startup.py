"""Start-up delay presets: derived transfer times, HyperFlexis's measured figures, errors."""

import pytest
from slolab.timing import available_presets, startup_delay_s, startup_table
from slolab.timing.startup import available_startup_presets, pcie_bytes_per_s, startup_preset


def test_pcie_bandwidth_from_the_specification():
    """PCIe 4.0 x4: 4 lanes x 16 GT/s x 128/130 / 8 = 7.877 GB/s; 5.0 x16 = 63.02 GB/s."""
    assert pcie_bytes_per_s(16, 4) == pytest.approx(7.876923e9, rel=1e-6)
    assert pcie_bytes_per_s(32, 16) == pytest.approx(63.015385e9, rel=1e-6)


def test_llama2_7b_h100_delays_are_weight_bytes_over_bandwidth():
    """Llama-2-7B: 6,738,415,616 params x 2 B = 13.48 GB over NVMe / PCIe 5 / NVLink."""
    weight_bytes = 2 * 6_738_415_616
    # disk: 13.477e9 / 7.877e9 = 1.711 s; host: / 63.02e9 = 0.2139 s; d2d: / 450e9 = 0.02995 s
    assert startup_delay_s("llama2-7b-h100", "disk") == pytest.approx(weight_bytes / 7.876923e9)
    assert startup_delay_s("llama2-7b-h100", "disk") == pytest.approx(1.7109, abs=1e-4)
    assert startup_delay_s("llama2-7b-h100", "host") == pytest.approx(0.21387, abs=1e-5)
    assert startup_delay_s("llama2-7b-h100", "d2d") == pytest.approx(weight_bytes / 450e9)


def test_tensor_parallel_shards_load_in_parallel_except_from_disk():
    """OPT-30B on 4 A100s: host = 59.95 GB / (4 x 31.51 GB/s) = 0.4757 s; disk is one drive."""
    weight_bytes = 2 * 29_974_540_288
    assert startup_delay_s("opt-30b-4gpu-slos", "host") == pytest.approx(
        weight_bytes / (4 * pcie_bytes_per_s(16, 16))
    )
    assert startup_delay_s("opt-30b-4gpu-slos", "disk") == pytest.approx(
        weight_bytes / pcie_bytes_per_s(16, 4)
    )


def test_hyperflexis_measured_figures():
    """HyperFlexis Table 2, Qwen-7B: fast scaling 0.89 s, CPU offloading 2.73 s, disk 4.14 s."""
    p = startup_preset("hyperflexis-qwen7b-ascend")
    assert (p.d2d_s, p.host_s, p.disk_s) == (0.89, 2.73, 4.14)
    # the measured disk load is 2.4x the transfer bound of a 7B model in FP16 from NVMe
    assert p.disk_s / startup_delay_s("llama2-7b-h100", "disk") == pytest.approx(2.42, abs=0.01)


def test_every_timing_preset_has_a_startup_preset_with_its_source():
    """Each timing preset names a start-up preset; delays order d2d <= host <= disk."""
    names = set(available_startup_presets())
    assert set(available_presets()) <= names
    for row in startup_table():
        assert row["source"]
        assert 0 < row["d2d_s"] <= row["host_s"] <= row["disk_s"]


def test_unknown_names_list_the_known_ones():
    """An unknown preset or weight source raises and lists the known ones."""
    with pytest.raises(
        ValueError, match="no start-up preset 'gpt-5'; known: codellama-34b/a100/tp1, .*hyperflexis"
    ):
        startup_delay_s("gpt-5", "disk")
    with pytest.raises(ValueError, match="unknown weight source 'tape'; known: disk, host, d2d"):
        startup_delay_s("llama2-7b-h100", "tape")
