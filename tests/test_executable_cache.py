"""The executable cache: the same graph compiles once (in memory and on disk); a changed graph
never hits a stale entry; a corrupt or foreign entry is ignored with a warning; it can be
switched off and cleared."""
import warnings

import numpy as np
import pytest

import ipulab
from ipulab import cli, poplar, poputil
from ipulab.poplar import engine as engine_module
from ipulab.poplar import executables as X
from ipulab.poplar import program as prog

DEV = ipulab.devices.ipu("ipu2", tiles_per_ipu=4)


class AddOne(poplar.Vertex):
    inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
    out = poplar.Output(poplar.Vector[poplar.FLOAT])

    @staticmethod
    def compute(inp, out):
        for i in range(len(out)):
            out[i] = inp[i] + 1.0


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A cache of this test's own; compile_graph calls counted."""
    monkeypatch.setenv("IPULAB_CACHE", str(tmp_path))
    monkeypatch.setattr(X, "DISK_MIN_SECONDS", 0.0)     # these graphs compile in no time
    X._memory.clear()
    calls = []
    real = engine_module.compile_graph

    def counting(*args):
        calls.append(1)
        return real(*args)
    monkeypatch.setattr(engine_module, "compile_graph", counting)
    yield calls
    X._memory.clear()


def build(value=1.0, codelet=AddOne, tile=1, name="x"):
    g = poplar.Graph(DEV.target)
    x = g.add_variable(poplar.FLOAT, [8], name)
    c = g.add_constant(poplar.FLOAT, [8], value, "c")
    y = g.add_variable(poplar.FLOAT, [8], "y")
    poputil.map_tensor_linearly(g, c)
    g.set_tile_mapping(x, tile)
    g.set_tile_mapping(y, 2)
    cs = g.add_compute_set("add")
    g.add_vertices(cs, codelet, [2, 3], {"in": x.reshape([2, 4]), "out": y.reshape([2, 4])})
    g.create_host_read("y", y)
    return g, prog.Sequence([prog.Copy(c, x), prog.Execute(cs)])


def run(g, p, options=None):
    e = poplar.Engine(g, p, options)
    e.load(DEV)
    e.run()
    return e, e.read_tensor("y"), e.profile().total_cycles


def test_the_same_graph_compiles_once(cache):
    e1, y1, c1 = run(*build())
    e2, y2, c2 = run(*build())
    assert len(cache) == 1
    assert e1._compiled.cache_key == e2._compiled.cache_key
    np.testing.assert_array_equal(y1, y2)
    assert c1 == c2 and (y1 == 2.0).all()
    assert e2.profile().graph.num_vertices == 2          # the new graph's own summary


def test_engines_sharing_an_executable_each_run_on_their_own_arenas(cache):
    """A step's kernel calls are made once per engine's arenas (a cached executable is shared):
    two engines run in turns, and one loaded again, each compute on their own data."""
    def engine():
        g = poplar.Graph(DEV.target)
        x, y = g.add_variable(poplar.FLOAT, [8], "x"), g.add_variable(poplar.FLOAT, [8], "y")
        g.set_tile_mapping(x, 1)
        g.set_tile_mapping(y, 2)
        cs = g.add_compute_set("add")
        g.add_vertices(cs, AddOne, [2, 3], {"in": x.reshape([2, 4]), "out": y.reshape([2, 4])})
        g.create_host_write("x", x)
        g.create_host_read("y", y)
        e = poplar.Engine(g, prog.Execute(cs))
        e.load(DEV)
        return e
    engines = [engine(), engine()]
    assert len(cache) == 1
    for k in range(3):
        for i, e in enumerate(engines):
            if k == 2 and i == 0:
                e.load(DEV)                              # new arenas
            e.write_tensor("x", np.full(8, 10 * i + k, np.float32))
            e.run()
        for i, e in enumerate(engines):
            np.testing.assert_array_equal(e.read_tensor("y"), np.full(8, 10 * i + k + 1))


def test_any_change_is_a_new_key(cache):
    keys = {run(*build(**kw))[0]._compiled.cache_key for kw in (
        {}, {"value": 2.0}, {"tile": 0}, {"name": "x2"})}
    assert len(keys) == 4 and len(cache) == 4

    class AddOneAgain(poplar.Vertex):            # same fields, another compute
        inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
        out = poplar.Output(poplar.Vector[poplar.FLOAT])

        @staticmethod
        def compute(inp, out):
            for i in range(len(out)):
                out[i] = inp[i] + 2.0
    e, y, _ = run(*build(codelet=AddOneAgain))
    assert (y == 3.0).all() and e._compiled.cache_key not in keys
    g, p = build()
    assert X.executable_key(g._state, [p], "compiled") != X.executable_key(g._state, [p],
                                                                            "checked")


def test_a_new_process_finds_it_on_disk(cache):
    _, y1, c1 = run(*build())
    assert len(X.entries()) == 1
    X._memory.clear()                              # as a new process would start
    e, y2, c2 = run(*build())
    assert len(cache) == 1                          # loaded, not compiled
    np.testing.assert_array_equal(y1, y2)
    assert c1 == c2


def test_a_codelet_made_at_run_time_is_made_again():
    """Generated codelets (popops' maps) are stored as the recipe that makes them."""
    from ipulab import popops

    def graph():
        g = poplar.Graph(DEV.target)
        x = g.add_variable(poplar.FLOAT, [16], "x")
        poputil.map_tensor_linearly(g, x)
        g.create_host_write("x", x)
        seq = prog.Sequence()
        y = popops.map(g, popops.expr._1 * 3.0 + 1.0, [x], seq, "f")
        g.create_host_read("y", y)
        return g, seq
    outs = []
    for _ in range(2):
        g, seq = graph()
        e = poplar.Engine(g, seq)
        e.load(DEV)
        e.write_tensor("x", np.arange(16, dtype=np.float32))
        e.run()
        outs.append(e.read_tensor("y"))
        X._memory.clear()
    np.testing.assert_array_equal(outs[0], outs[1])
    assert len(X.entries()) == 1


def test_a_codelet_defined_in_a_function_stays_in_memory(cache):
    class Local(poplar.Vertex):
        inp = poplar.Input(poplar.Vector[poplar.FLOAT], name="in")
        out = poplar.Output(poplar.Vector[poplar.FLOAT])

        @staticmethod
        def compute(inp, out):
            for i in range(len(out)):
                out[i] = inp[i]
    run(*build(codelet=Local))
    run(*build(codelet=Local))
    assert len(cache) == 1 and X.entries() == []     # no file: it could not be found again


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign"])
def test_a_corrupt_or_foreign_entry_is_ignored_with_a_warning(cache, damage):
    _, y1, _ = run(*build())
    (path,) = X.entries()
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not an executable")
    elif damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
    else:                                          # another cache signed it
        (path.parent / ".secret").write_bytes(b"k" * 32)
    X._memory.clear()
    with pytest.warns(RuntimeWarning, match="ignoring cache entry"):
        _, y2, _ = run(*build())
    assert len(cache) == 2                          # compiled again ...
    np.testing.assert_array_equal(y1, y2)
    X._memory.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(*build())                               # ... and stored again, readable
    assert len(cache) == 2


def test_switched_off_and_cleared(cache, monkeypatch, capsys):
    run(*build(), options={"cache": "false"})
    run(*build(), options={"cache": "false"})
    assert len(cache) == 2 and X.entries() == []
    monkeypatch.setenv("IPULAB_CACHE", "off")
    run(*build())
    run(*build())
    assert len(cache) == 4
    monkeypatch.undo()
    X._memory.clear()
    with pytest.raises(ipulab.errors.EngineError, match="option 'cache' takes one of"):
        build_and = build()
        poplar.Engine(*build_and, {"cache": "maybe"})


def test_the_folder_is_kept_under_its_limit(cache, monkeypatch):
    run(*build())
    (first,) = X.entries()
    monkeypatch.setattr(X, "DISK_LIMIT_BYTES", first.stat().st_size * 3 // 2)
    run(*build(value=3.0))
    assert X.entries() != [first] and len(X.entries()) == 1     # the older one went


def test_a_quick_compile_stays_in_memory(cache, monkeypatch):
    monkeypatch.setattr(X, "DISK_MIN_SECONDS", 60.0)
    run(*build())
    assert X.entries() == [] and len(X._memory) == 1


def test_memory_keeps_at_most_its_bytes_of_executables(cache, monkeypatch):
    """Big executables (a Pod16 GPT's is ~270 MB) are not kept eight at a time: the oldest go
    once the entries' bytes pass MEMORY_BYTES; the newest always stays; the disk keeps all."""
    run(*build(value=1.0))
    one = X.entries()[0].stat().st_size
    monkeypatch.setattr(X, "MEMORY_BYTES", one + one // 2)
    run(*build(value=2.0))
    assert len(X._memory) == 1 and len(X.entries()) == 2
    monkeypatch.setattr(X, "MEMORY_BYTES", 1)
    run(*build(value=1.0))                          # from disk: its size counts too
    assert len(X._memory) == 1 and len(cache) == 2
    monkeypatch.setattr(X, "MEMORY_BYTES", 10 * one)
    run(*build(value=2.0))
    assert len(X._memory) == 2 and len(cache) == 2
    X.forget_in_memory()
    assert not X._memory and len(X.entries()) == 2


def test_cli_reports_and_clears(cache, capsys):
    run(*build())
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "executable cache: on" in out and "entries: 1" in out
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 1 executable(s)" in capsys.readouterr().out
    assert X.entries() == [] and not X._memory
    run(*build())
    assert len(cache) == 2                          # compiled again after clearing


def test_a_trainer_built_again_reuses_its_executable(cache):
    from ipulab import nn
    x, y, _, _ = ipulab.data.digits()
    dev = ipulab.devices.ipu("bow", tiles_per_ipu=8)
    losses = []
    for _ in range(2):
        t = nn.Trainer(nn.default_cnn(), dev, batch_size=8, lr=0.1, input_shape=(1, 8, 8))
        losses.append(t.fit(x[:16], y[:16], shuffle=False)["loss"])
    assert len(cache) == 1 and losses[0] == losses[1]


def test_an_empty_setting_means_the_default_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("IPULAB_CACHE", "")
    monkeypatch.delenv("IPULAB_CACHE_DIR", raising=False)
    assert X.folder() == tmp_path / ".cache" / "ipulab" / "executables"


def test_the_same_graph_on_another_machine_is_another_key():
    """A Pod128 of two racks and the same IPUs in one rack cost collectives differently."""
    import dataclasses
    from ipulab import arch
    from ipulab.poplar.executables import executable_key
    from ipulab.target import Target
    keys = []
    for system in (arch.pod(128), dataclasses.replace(arch.pod(128), ipus_per_rack=0)):
        g = poplar.Graph(Target(arch.bow, 128, 2, system=system))
        t = g.add_variable(poplar.FLOAT, [4], "t")
        g.set_tile_mapping(t, 0)
        keys.append(executable_key(g.get_top_level_graph()._state, [], "compiled"))
    assert keys[0] != keys[1]


@pytest.mark.parametrize("a", [np.array(3.0, np.float32), np.zeros((0, 3), np.float32),
                               np.zeros((5, 0), np.int32), np.arange(12).reshape(3, 4)[:, 1],
                               np.ones((2, 3, 4)), np.array([True, False])],
                         ids=["0-d", "0x3", "5x0", "strided", "2x3x4", "bool"])
def test_the_key_hashes_an_arrays_bytes_as_tobytes_gives_them(a):
    """Keys hash the graph's columns without copying them: the same bytes as tobytes(), for
    every shape (an empty 2-D one too), so equal graphs keep equal keys."""
    assert bytes(X._raw(a)) == a.tobytes()


@pytest.mark.parametrize("short", [-1, 16, 10**9], ids=["none-short", "some-short", "all-short"])
def test_the_key_is_the_same_however_its_columns_are_gathered(monkeypatch, short):
    """Short columns are hashed together, long ones in place: where the line falls never
    changes a key (single vertices, a bulk group, and a single vertex on a long tensor here)."""
    g, p = build()
    long = g.add_variable(poplar.FLOAT, [64], "long")
    g.set_tile_mapping(long, 0)
    cs = g.add_compute_set("more")
    g.add_vertex(cs, AddOne, {"in": long, "out": long}, 0)
    for tile in range(4):
        g.add_vertex(cs, AddOne, {"in": long[tile:tile + 1], "out": long[tile + 8:tile + 9]}, tile)
    monkeypatch.setattr(X, "SHORT_COLUMN_BYTES", 4096)
    default = X.executable_key(g._state, [p], "compiled")
    monkeypatch.setattr(X, "SHORT_COLUMN_BYTES", short)
    assert X.executable_key(g._state, [p], "compiled") == default
