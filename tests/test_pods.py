"""IPU-PODs: sizes, machines, the torus inside a rack, GW-Links between racks."""
import dataclasses
import tracemalloc

import numpy as np
import pytest

from ipulab import arch, devices, gcl, poplar, poputil
from ipulab.errors import GraphError
from ipulab.poplar import program as prog
from ipulab.target import Target


@pytest.mark.parametrize("n", [16, 32, 64, 128, 256])
def test_pods_of_bow_2000s_and_m2000s(n):
    bow, m2000 = devices.pod(n), devices.pod(n, ipu="ipu2")
    assert bow.target.num_ipus == m2000.target.num_ipus == n
    assert bow.target.system.num_machines == n // 4
    assert bow.target.system.streaming_memory_bytes == n // 4 * 256 * 10**9
    assert m2000.target.system.streaming_memory_bytes == n // 4 * 128 * 10**9
    assert bow.target.system.num_racks == max(1, n // 64)
    assert bow.target.system.topology == ("ladder" if n == 16 else "torus")


@pytest.mark.parametrize("bad", [0, 8, 12, 48, 100])
def test_a_pod_size_is_a_power_of_two_of_16_or_more(bad):
    with pytest.raises(GraphError, match="power of two"):
        devices.pod(bad)


def test_pods_are_made_of_bow_or_gc200_machines():
    with pytest.raises(GraphError, match="Bow-2000s"):
        devices.pod(16, ipu="ipu1")


def test_named_pods_and_a_pod256_target_is_cheap():
    assert {"pod16", "pod64", "pod128", "pod256"} <= set(devices.SYSTEM_NAMES)
    assert devices.system("pod128").target.system == arch.pod(128)
    tracemalloc.start()                 # nothing per tile: 376,832 tiles would be 368 KB a byte
    try:
        pod = devices.pod(256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pod.target.num_tiles == 256 * 1472 and peak < 64 * 1024, peak


def test_the_torus_wraps_round_inside_a_rack():
    pod64 = arch.pod(64)
    assert pod64.route(0, 60) == (pod64.links_between_machines, 1)      # machine 0 -> 15
    assert pod64.route(0, 3) == (pod64.links_within_machine, 1)
    assert arch.SYSTEMS["pod16"].route(0, 12) == (2, 3)                 # a ladder does not


def _all_reduce_cycles(target: Target) -> int:
    g = poplar.Graph(target, replication_factor=target.num_ipus)
    t = g.add_variable(poplar.FLOAT, [256], "t")
    poputil.map_tensor_linearly(g, t)
    seq = prog.Sequence()
    gcl.all_reduce_in_place(g, t, "add", seq)
    g.create_host_write("t", t)
    g.create_host_read("out", t)
    e = poplar.Engine(g, seq)
    e.load(poplar_device(target))
    e.write_tensor("t", np.ones((target.num_ipus, 256), np.float32))
    e.run()
    assert (e.read_tensor("out") == target.num_ipus).all()
    return e.profile().total_cycles


def poplar_device(target):
    return devices.Device(target)


def test_a_collective_across_racks_pays_the_gw_links():
    two_racks = arch.pod(128)
    one_rack = dataclasses.replace(two_racks, ipus_per_rack=0)
    across = _all_reduce_cycles(Target(arch.bow, 128, 2, system=two_racks))
    inside = _all_reduce_cycles(Target(arch.bow, 128, 2, system=one_rack))
    assert across > inside


def test_a_target_must_match_its_system():
    with pytest.raises(GraphError, match="has 16"):
        Target(arch.bow, 8, 2, system=arch.pod(16))
