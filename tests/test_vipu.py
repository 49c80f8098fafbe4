"""ipulab.vipu: the V-IPU controller's rules (each broken rule its own error), partitions as
devices, and isolation enforced by the simulator."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from ipulab import arch, data, devices, errors, nn, poplar, poputil, vipu
from ipulab.poplar import program as prog
from ipulab.target import Target


@pytest.fixture
def db(tmp_path):
    return tmp_path / "vipu.sqlite"


@pytest.fixture
def ctl(db):
    """A Pod16 granted to everyone, acting for alice."""
    c = vipu.connect(db, user="alice")
    c.init("pod16")
    return c


@pytest.fixture
def split(db):
    """A Pod16 of two allocations: machines 0-1 for alice, 2-3 for everyone."""
    c = vipu.connect(db, user="alice")
    c.init("pod16", allocations={"a": (0, 2, "alice"), "b": (2, 2, None)})
    return c


def ipus_in_use(ctl):
    return sorted(i for p in ctl.list_partitions() for i in p.ipus)


# --- allocations -----------------------------------------------------------------------------------
def test_init_without_allocations_grants_the_whole_pod_to_everyone(ctl, db):
    (a,) = vipu.connect(db, user="zoe").list_allocations()
    assert (a.name, a.user, a.num_ipus, a.free) == ("all", None, 16, tuple(range(16)))
    assert ctl.system.name == "pod16"


def test_allocations_from_specs_and_pod64(db):
    c = vipu.connect(db, user="alice")
    allocs = c.init("pod64", allocations=["big=0-7", "mine=8:alice", "rest=9-15:bob"])
    assert [(a.name, a.first_ipu, a.num_ipus, a.user) for a in allocs] == [
        ("big", 0, 32, None), ("mine", 32, 4, "alice"), ("rest", 36, 28, "bob")]
    assert [a.name for a in c.list_allocations()] == ["big", "mine"]   # rest is bob's


@pytest.mark.parametrize("allocations, words", [
    (["a=0-1", "b=1-2"], "one allocation"),        # machine 1 twice
    (["a=0-4"], "machines 0 to 3"),                # a Pod16 has machines 0-3
    (["a=2-1"], "empty"),
    (["a"], "NAME=MACHINES"),
])
def test_bad_allocations_are_refused(db, allocations, words):
    with pytest.raises(errors.AllocationError, match=words):
        vipu.connect(db, user="alice").init("pod16", allocations=allocations)


def test_user_names_are_checked(db):
    with pytest.raises(errors.VipuError, match="a user name is"):
        vipu.connect(db, user="bad user").init("pod16", allocations=["a=0:bad user"])
    with pytest.raises(errors.VipuError, match="a user name is"):
        vipu.connect(db, user="")


def test_unknown_system(db):
    with pytest.raises(errors.StateError, match="unknown Pod 'pod12'"):
        vipu.connect(db, user="alice").init("pod12")


# --- the partition rules ----------------------------------------------------------------------------
def test_partitions_are_aligned_blocks_in_the_order_asked(ctl):
    sizes = [1, 2, 4, 8, 1]
    parts = [ctl.create_partition(f"p{i}", n) for i, n in enumerate(sizes)]
    assert [p.ipus for p in parts] == [(0,), (2, 3), (4, 5, 6, 7), tuple(range(8, 16)), (1,)]
    assert ipus_in_use(ctl) == list(range(16))


@pytest.mark.parametrize("size", [0, 3, 12, -4, 2.0, True, "4"])
def test_size_must_be_a_power_of_two(ctl, size):
    with pytest.raises(errors.PartitionSizeError, match="power of two"):
        ctl.create_partition("p", size)
    assert ctl.list_partitions() == []


def test_size_larger_than_the_pod(ctl):
    with pytest.raises(errors.PartitionSizeError, match="larger than the pod16.s 16 IPUs; free: all: IPUs 0-15"):
        ctl.create_partition("p", 32)


def test_a_partition_cannot_span_allocations(split):
    with pytest.raises(errors.AllocationError, match=r"cannot span allocations.*has 8; free: a: IPUs 0-7; b: IPUs 8-15"):
        split.create_partition("p", 16)


def test_a_partition_needs_free_ipus_and_says_which_are_free(split):
    split.create_partition("p1", 4, allocation="a")
    split.create_partition("p2", 2, allocation="a")
    with pytest.raises(errors.NoFreeIpusError, match=r"free: a: IPUs 6-7$"):
        split.create_partition("p3", 4, allocation="a")
    assert split.create_partition("p3", 4).allocation == "b"   # the next allocation


def test_unknown_or_foreign_allocation(split, db):
    with pytest.raises(errors.AllocationError, match="no allocation 'zz'"):
        split.create_partition("p", 4, allocation="zz")
    with pytest.raises(errors.AllocationError, match="no allocation 'a' granted to user 'bob'"):
        vipu.connect(db, user="bob").create_partition("p", 4, allocation="a")


def test_names_are_unique_and_well_formed(ctl, db):
    ctl.create_partition("p", 2)
    with pytest.raises(errors.PartitionNameError,
                       match=r"already exists \(owner alice\): partition names are unique"):
        ctl.create_partition("p", 2)
    with pytest.raises(errors.PartitionNameError) as refused:   # bob cannot see whose it is
        vipu.connect(db, user="bob").create_partition("p", 2)
    assert "partition names are unique" in str(refused.value)
    assert "alice" not in str(refused.value)
    for bad in ("", "a b", "-x", "x" * 65, None):
        with pytest.raises(errors.PartitionNameError):
            ctl.create_partition(bad, 2)


def test_reconfigurable_needs_c2_compatible_sync(ctl):
    assert ctl.create_partition("r", 2, reconfigurable=True).sync_type == "c2-compatible"
    with pytest.raises(errors.SyncTypeError, match="needs the c2-compatible"):
        ctl.create_partition("s", 2, reconfigurable=True, sync_type="pod-native-default")
    with pytest.raises(errors.SyncTypeError, match="unknown sync type"):
        ctl.create_partition("s", 2, sync_type="fast")
    assert ctl.create_partition("s", 2).sync_type == "pod-native-default"


def test_gcds_split_the_partition(ctl):
    p = ctl.create_partition("g", 8, gcds=2)
    assert (p.gcd_ipus(0), p.gcd_ipus(1)) == ((0, 1, 2, 3), (4, 5, 6, 7))
    for bad in (3, 16, 0):
        with pytest.raises(errors.PartitionSizeError, match="GCDs"):
            ctl.create_partition("h", 8, gcds=bad)


# --- visibility, owners, removal -----------------------------------------------------------------
def test_visible_only_to_its_creator_unless_shared(ctl, db):
    bob = vipu.connect(db, user="bob")
    ctl.create_partition("mine", 4)
    assert bob.list_partitions() == []
    with pytest.raises(errors.UnknownPartitionError, match="visible only to its creator"):
        bob.partition("mine")
    ctl.share("mine", "bob")
    assert [p.name for p in bob.list_partitions()] == ["mine"]
    assert vipu.connect(db, user="carol").list_partitions() == []
    ctl.share("mine")                                          # everyone
    assert vipu.connect(db, user="carol").partition("mine").shared == ("*", "bob")


def test_only_the_creator_removes_or_shares(ctl, db):
    ctl.create_partition("mine", 4)
    ctl.share("mine", "bob")
    bob = vipu.connect(db, user="bob")
    with pytest.raises(errors.PartitionOwnerError, match="belongs to 'alice', and only its creator"):
        bob.remove_partition("mine")
    with pytest.raises(errors.PartitionOwnerError):
        bob.share("mine", "carol")
    assert [p.name for p in ctl.list_partitions()] == ["mine"]


def test_remove_frees_the_ipus_and_unknown_names_are_refused(ctl):
    ctl.create_partition("p", 16)
    with pytest.raises(errors.NoFreeIpusError):
        ctl.create_partition("q", 1)
    assert ctl.remove_partition("p").ipus == tuple(range(16))
    assert ctl.list_partitions() == [] and ctl.list_allocations()[0].free == tuple(range(16))
    with pytest.raises(errors.UnknownPartitionError, match="unknown partition 'p'"):
        ctl.remove_partition("p")


def test_a_new_partition_of_the_same_name_is_another_lease(ctl):
    a = ctl.create_partition("p", 4)
    ctl.remove_partition("p")
    b = ctl.create_partition("p", 4)
    assert a.ipus == b.ipus and a.lease != b.lease
    assert not ctl.alive(a.lease) and ctl.alive(b.lease)


def test_summary_and_dict(ctl):
    p = ctl.create_partition("p", 2)
    assert p.summary() == {"name": "p", "size": 2, "ipus": [0, 1], "user": "alice",
                           "allocation": "all"}
    assert p.to_dict()["machines"] == [0] and p.to_dict()["sync_type"] == "pod-native-default"


# --- a partition is a device ----------------------------------------------------------------------
def copy_job(device, values):
    """A small program over every IPU of a device: each IPU's block goes to the next IPU
    (IPU-Link traffic), then an all-IPU sync. Returns (engine, output)."""
    t = device.target
    g = poplar.Graph(t)
    n = t.num_ipus * 8
    a = g.add_variable(poplar.FLOAT, [n], "a")
    b = g.add_variable(poplar.FLOAT, [n], "b")
    poputil.map_tensor_linearly(g, a)
    for i in range(t.num_ipus):                     # b's block i lives on the next IPU
        g.set_tile_mapping(b[i * 8:(i + 1) * 8], ((i + 1) % t.num_ipus) * t.tiles_per_ipu)
    g.create_host_write("a", a)
    g.create_host_read("b", b)
    seq = prog.Sequence([prog.Copy(a, b), prog.Sync(poplar.SyncType.EXTERNAL)])
    e = poplar.Engine(g, seq)
    e.load(device)
    e.write_tensor("a", np.asarray(values, np.float32)[:n])
    e.run()
    return e, e.read_tensor("b")


def test_a_partition_device_is_exactly_its_ipus(ctl):
    ctl.create_partition("first", 8)
    p = ctl.create_partition("second", 8)
    dev = p.device(tiles_per_ipu=4)
    t = dev.target
    assert (t.num_ipus, t.tiles_per_ipu, t.partition) == (8, 4, f"second#{p.lease}")
    assert t.system.ipus == tuple(range(8, 16))
    pod = vipu.pod_system("pod16")
    for a, b in [(0, 4), (1, 7), (0, 1)]:          # routes are the Pod's between the IPUs
        assert t.system.route(a, b) == pod.route(8 + a, 8 + b)
    # the sync domain is the partition's 8 IPUs, not the Pod's 16
    assert t.sync_cycles("external") == Target(arch.bow, 8, 4).sync_cycles("external")
    assert t.sync_cycles("external") < devices.pod16(4).target.sync_cycles("external")


def test_an_engine_runs_on_a_partition_as_on_the_same_ipus_of_the_pod(ctl):
    ctl.create_partition("first", 8)
    p = ctl.create_partition("second", 8)
    values = np.arange(64, dtype=np.float32)
    e, out = copy_job(p.device(tiles_per_ipu=4), values)
    assert np.array_equal(out, values)
    src, dst, nbytes = e.profile().exchange_traffic()
    ipus = np.asarray(p.ipus)
    assert nbytes.sum() > 0
    assert set(ipus[src // 4]) | set(ipus[dst // 4]) <= set(p.ipus)   # never leaves it
    # the same copy on a plain 8-IPU ladder (the same links) costs the same link cycles
    e2, _ = copy_job(devices.Device(Target(arch.bow, 8, 4)), values)
    assert e.profile().inter_ipu_exchange_cycles.max() == \
        e2.profile().inter_ipu_exchange_cycles.max()


def test_ipuof_and_session_configs_list_only_the_partitions_devices(ctl):
    ctl.create_partition("first", 4)
    p = ctl.create_partition("p", 4, gcds=2)
    cfg = p.ipuof_config()
    assert cfg["attributes"]["partition_id"] == "p" and cfg["attributes"]["num_gcds"] == 2
    assert [d["ipus"] for d in cfg["devices"]] == [[4], [5], [6], [7], [4, 5], [6, 7]]
    s = p.session_config([0, 4])
    assert [d["id"] for d in s["devices"]] == [0, 4]
    with pytest.raises(errors.PartitionError, match="devices"):
        p.session_config([9])


def test_gcds_are_independent_poplar_instances(ctl):
    p = ctl.create_partition("p", 4, gcds=2)
    d0, d1 = p.devices(tiles_per_ipu=4)
    assert d0.target.system.ipus == (0, 1) and d1.target.system.ipus == (2, 3)
    with pytest.raises(errors.PartitionError, match="2 GCDs"):
        p.device()
    e, _ = copy_job(d0, np.ones(16))
    with pytest.raises(errors.PartitionError, match="isolated"):
        e.load(d1)


# --- isolation --------------------------------------------------------------------------------------
@pytest.fixture
def tenants(db):
    """alice's partition "a" and bob's partition "b", 2 IPUs each, on a Pod16."""
    alice = vipu.connect(db, user="alice")
    alice.init("pod16")
    bob = vipu.connect(db, user="bob")
    return alice, alice.create_partition("a", 2), bob, bob.create_partition("b", 2)


def test_a_program_cannot_name_another_partitions_ipus_streams_or_buffers(tenants):
    _, a, _, b = tenants
    ga, gb = poplar.Graph(a.device(tiles_per_ipu=4).target), \
        poplar.Graph(b.device(tiles_per_ipu=4).target)
    x = ga.add_variable(poplar.FLOAT, [4], "x")
    with pytest.raises(errors.PartitionError, match="tile 8 does not exist.*another partition"):
        ga.set_tile_mapping(x, 8)                    # the first tile past a's IPUs
    poputil.map_tensor_linearly(ga, x)
    stream = gb.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    buf = gb.add_remote_buffer("rb", poplar.FLOAT, 4)
    y = gb.add_variable(poplar.FLOAT, [4], "y")
    for p, what in [(prog.Copy(stream, x), "DataStream 'in'"), (prog.Copy(buf, x), "'rb'"),
                    (prog.Copy(x, buf), "'rb'"), (prog.Copy(y, x), "Tensor 'y'")]:
        with pytest.raises(errors.PartitionError, match=f"{what}.*partition b#"):
            poplar.Engine(ga, p)
    e = poplar.Engine(ga, prog.Sequence())
    with pytest.raises(errors.PartitionError, match="this program is for partition a#"):
        e.load(b.device(tiles_per_ipu=4))
    with pytest.raises(errors.PartitionError, match="partition a#.* and that is partition"):
        e.load(devices.Device(Target(arch.bow, 2, 4)))   # nor a plain device of that shape


def train_small(device, steps=3):
    """A small CNN trained for a few steps on a device: (weights, losses, step profile)."""
    x, y = data.digits()[:2]
    tr = nn.Trainer(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.Linear(64, 10)),
                    device, batch_size=8, lr=0.1, seed=3)
    n = steps * tr.global_batch_size
    tr.fit(x[:n], y[:n], epochs=1, shuffle=False)
    return tr.get_weights(), tr.history["loss"], tr.profile()


def test_two_tenants_at_once_get_bit_identical_results(tenants):
    _, a, _, b = tenants
    alone = {p.name: train_small(p.device(tiles_per_ipu=16)) for p in (a, b)}
    together = {}

    def job(p):
        together[p.name] = train_small(p.device(tiles_per_ipu=16))
    threads = [threading.Thread(target=job, args=(p,)) for p in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in "ab":
        (w1, l1, p1), (w2, l2, p2) = alone[name], together[name]
        assert l1 == l2 and p1.to_dict() == p2.to_dict()
        assert all(np.array_equal(w1[k], w2[k]) for k in w1)
    for p in (a, b):        # the gradient all-reduce crosses IPU-Links, only between its IPUs
        src, dst, nbytes = alone[p.name][2].exchange_traffic()
        ipus = np.asarray(p.ipus)
        across = src // 16 != dst // 16
        assert nbytes[across].sum() > 0
        assert set(ipus[src // 16]) | set(ipus[dst // 16]) == set(p.ipus)


def test_removing_a_partition_stops_its_job_and_no_other(tenants, db):
    alice, a, _, b = tenants
    x, y = data.digits()[:2]
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    ta = nn.Trainer(model, a.device(tiles_per_ipu=16), batch_size=8, lr=0.1)
    tb = nn.Trainer(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), b.device(tiles_per_ipu=16),
                    batch_size=8, lr=0.1)
    ref = nn.Trainer(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)),
                     devices.Device(Target(arch.bow, 2, 16)), batch_size=8, lr=0.1)

    def remove_after_two(tr, epoch, step, steps, loss, acc):
        if step == 1:
            vipu.connect(db, user="alice").remove_partition("a")   # e.g. from another notebook
    with pytest.raises(errors.PartitionError, match="'a' .*has been removed"):
        ta.fit(x[:160], y[:160], shuffle=False, callback=remove_after_two)
    tb.fit(x[:160], y[:160], shuffle=False)
    ref.fit(x[:160], y[:160], shuffle=False)
    assert tb.history["loss"] == ref.history["loss"]           # bob never noticed
    with pytest.raises(errors.PartitionError, match="removed"):
        ta.evaluate(x[:16], y[:16])


def test_a_removed_partitions_memory_is_cleared_before_reuse(tenants):
    alice, a, _, _ = tenants
    dev = a.device(tiles_per_ipu=4)
    e, out = copy_job(dev, np.arange(1, 17))
    assert dev.memory_bytes() > 0
    alice.remove_partition("a")
    assert dev.memory_bytes() == 0              # zeroed when the partition went
    with pytest.raises(errors.PartitionError, match="removed"):
        e.read_tensor("b")
    again = alice.create_partition("again", 2)
    assert again.ipus == a.ipus                 # the same IPUs, handed out clean
    dev2 = again.device(tiles_per_ipu=4)
    assert dev2.memory_bytes() == 0
    with pytest.raises(errors.PartitionError, match="isolated"):
        e.load(dev2)                            # the old program cannot come back either


def test_allocations_as_a_dict(db):
    c = vipu.connect(db, user="alice")
    allocs = c.init("pod16", allocations={"a": "0-1:alice", "b": (2, 1), "c": (3, 1, "bob")})
    assert [(a.name, a.first_machine, a.machines, a.user) for a in allocs] == [
        ("a", 0, 2, "alice"), ("b", 2, 1, None), ("c", 3, 1, "bob")]
    for bad in ({"a": 2}, {"a": (0,)}, {"a": ("x", 1)}):
        with pytest.raises(errors.AllocationError, match=r"give \(first_machine"):
            c.init("pod16", allocations=bad)


def test_partitions_in_an_allocation_that_starts_mid_pod(db):
    c = vipu.connect(db, user="alice")
    c.init("pod16", allocations=["x=0", "y=1-3"])
    assert c.create_partition("p", 8, allocation="y").ipus == tuple(range(4, 12))
    assert [p.ipus for p in c.list_partitions()] == [tuple(range(4, 12))]   # read back valid


@pytest.mark.parametrize("system, ipus, chip", [("pod64", 64, "bow"), ("pod128", 128, "bow"),
                                                ("m2000-pod16", 16, "ipu2")])
def test_any_pod_of_arch(db, system, ipus, chip):
    c = vipu.connect(db, user="alice")
    c.init(system)
    p = c.create_partition("all", ipus)
    t = p.device(tiles_per_ipu=1).target
    assert (t.num_ipus, t.arch, t.system.num_racks) == (ipus, chip, max(1, ipus // 64))


def test_no_login_name_is_a_clear_error(db, monkeypatch):
    def no_passwd_entry():
        raise KeyError("getpwuid(): uid not found: 1234")
    monkeypatch.delenv("IPULAB_USER", raising=False)
    monkeypatch.setattr("getpass.getuser", no_passwd_entry)
    with pytest.raises(errors.VipuError, match="IPULAB_USER"):
        vipu.connect(db)


# A codelet that lets the test remove its partition while a run is inside it (python mode runs
# compute as plain Python, so it can wait on the test's events).
IN_RUN, REMOVED = threading.Event(), threading.Event()


class Pause(poplar.Vertex):
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(out):
        IN_RUN.set()
        REMOVED.wait(30)
        for i in range(len(out)):
            out[i] = 7.0


def test_removing_a_partition_in_the_middle_of_a_run_stops_it(tenants):
    alice, a, _, _ = tenants
    dev = a.device(tiles_per_ipu=4)
    g = poplar.Graph(dev.target)
    g.add_codelets(Pause)
    x = g.add_variable(poplar.FLOAT, [4], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("pause")
    g.set_tile_mapping(g.add_vertex(cs, "Pause", {"out": x}), 0)
    out = g.add_device_to_host_fifo("out", poplar.FLOAT, 4)
    e = poplar.Engine(g, prog.Sequence([prog.Execute(cs), prog.Copy(x, out)]),
                      options={"debug.codeletMode": "python"})
    e.load(dev)
    host = np.zeros(4, np.float32)
    e.connect_stream("out", host)
    failure = []
    job = threading.Thread(target=lambda: failure.append(pytest.raises(
        errors.PartitionError, e.run)))
    job.start()
    assert IN_RUN.wait(30)
    alice.remove_partition("a")
    REMOVED.set()
    job.join(30)
    assert "has been removed" in str(failure[0].value)
    assert (host == 0).all()                # nothing of the stopped run reached the host


def test_a_shared_partition_runs_for_the_user_it_is_shared_with(tenants, db):
    alice, a, bob, _ = tenants
    with pytest.raises(errors.UnknownPartitionError):
        bob.partition("a")
    alice.share("a", ["bob"])
    dev = bob.partition("a").device(tiles_per_ipu=4)
    _, out = copy_job(dev, np.arange(16))
    assert np.array_equal(out, np.arange(16, dtype=np.float32))
    assert len(bob.partition("a").devices()) == 1
    with pytest.raises(errors.VipuError, match="a user name"):
        alice.share("a", ["bad user"])
