"""Hardware presets agree with the published figures in IPU_FACTS, and system routes are sane."""
import pytest

from ipulab.arch import CHIPS, KIB, SYSTEMS, bow, ipu1, ipu2, system_for


def test_tiles_and_memory():
    assert (ipu1.tiles_per_ipu, ipu2.tiles_per_ipu, bow.tiles_per_ipu) == (1216, 1472, 1472)
    assert ipu1.bytes_per_tile == 256 * KIB
    assert ipu2.bytes_per_tile == bow.bytes_per_tile == 624 * KIB == 638_976
    assert all(c.num_worker_contexts == 6 for c in CHIPS.values())


def test_clocks():
    assert ipu1.clock_hz == pytest.approx(1.6e9)
    assert ipu2.clock_hz == pytest.approx(1.33e9)
    assert bow.clock_hz == pytest.approx(1.85e9)


def test_peak_flops():
    assert ipu2.peak_fp16_flops == pytest.approx(250e12, rel=0.01)
    assert bow.peak_fp16_flops == pytest.approx(350e12, rel=0.01)
    assert ipu1.peak_fp16_flops == pytest.approx(124.5e12, rel=0.01)
    assert ipu2.peak_fp32_flops == pytest.approx(62.5e12, rel=0.01)


def test_bow2000_totals():
    s = SYSTEMS["bow2000"]
    assert s.num_ipus == 4 and s.chip is bow
    # Graphcore counts SRAM in MiB ("897 MB" per IPU = 1472 x 624 KiB): 4 x 897 MB ~ 3.6 GB.
    total_mb = s.num_ipus * bow.tiles_per_ipu * bow.bytes_per_tile / 2**20
    assert total_mb / 1000 == pytest.approx(3.6, rel=0.01)
    assert s.peak_fp16_flops == pytest.approx(1.4e15, rel=0.01)


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_routes_symmetric(name):
    s = SYSTEMS[name]
    for a in range(s.num_ipus):
        assert s.route(a, a) == (0, 0)
        for b in range(a + 1, s.num_ipus):
            links, hops = s.route(a, b)
            assert (links, hops) == s.route(b, a)
            assert links > 0 and hops > 0


def test_system_for():
    assert system_for(bow, 4) is SYSTEMS["bow2000"]
    assert system_for(ipu2, 4) is SYSTEMS["m2000"]
    assert system_for(bow, 1).num_ipus == 1
    odd = system_for(bow, 8)
    assert odd.num_ipus == 8 and odd.chip is bow
