"""Liveness (README, "Liveness: which variables share memory"): a variable that is not always
live occupies tile memory only from its first write to its last read, and shares addresses with
variables whose lifetimes do not overlap. It is accounting only: results never change."""
import numpy as np
import pytest
from bokeh.models import ColumnDataSource
from helpers import run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

import ipulab
from ipulab import nn, poplar, viz
from ipulab.errors import TileMemoryError
from ipulab.machine.memory import CATEGORY, TileMemory
from ipulab.poplar import program as prog

F = poplar.FLOAT
N = 1000            # elements of each test variable: 4,000 B, a multiple of the 8-byte alignment
B = 4 * N


class AddOne(poplar.Vertex):
    a = poplar.Input(poplar.Vector[F])
    b = poplar.Output(poplar.Vector[F])

    @staticmethod
    def compute(a, b):
        for i in range(len(b)):
            b[i] = a[i] + 1.0


class Fill(poplar.Vertex):
    out = poplar.Output(poplar.Vector[F])

    @staticmethod
    def compute(out):
        for i in range(len(out)):
            out[i] = 1.0


class Bump(poplar.Vertex):
    x = poplar.InOut(poplar.Vector[F])

    @staticmethod
    def compute(x):
        for i in range(len(x)):
            x[i] += 1.0


class Tile0:
    """A graph whose variables and vertices all live on tile 0."""

    def __init__(self, dev, n=N):
        self.dev, self.g, self.n = dev, poplar.Graph(dev.target), n
        self.g.add_codelets([AddOne, Fill, Bump])

    def var(self, name, n=None):
        t = self.g.add_variable(F, [n or self.n], name)
        self.g.set_tile_mapping(t, 0)
        return t

    def step(self, codelet, **fields):
        cs = self.g.add_compute_set("+".join(t.name for t in fields.values()))
        self.g.add_vertex(cs, codelet, fields, tile=0)
        return prog.Execute(cs)

    def add_one(self, a, b):
        return self.step(AddOne, a=a, b=b)

    def run(self, programs, program=0):
        return run_engine(self.g, programs, self.dev, program=program)


def intervals(profile) -> dict[str, list]:
    """name -> [(program, first, last)] of the variables that are not always live."""
    out: dict[str, list] = {}
    for name, root, first, last in profile.not_always_live():
        out.setdefault(name, []).append((root, first, last))
    return out


def addresses(profile, tile=0) -> dict[str, int]:
    return {owner: a for a, _, _, owner in profile.memory_layout.allocations_on(tile)}


def chain(dev):
    """x -> a -> b -> c -> d -> y on tile 0: the host writes x and reads y."""
    k = Tile0(dev)
    x, a, b, c, d, y = (k.var(name) for name in "xabcdy")
    k.g.create_host_write("x", x)
    k.g.create_host_read("y", y)
    seq = [k.add_one(s, t) for s, t in zip((x, a, b, c, d), (a, b, c, d, y))]
    return k, prog.Sequence(seq)


# --- the rule ----------------------------------------------------------------------------------
def test_chain_shares_memory_between_disjoint_lifetimes(dev4):
    k, p = chain(dev4)
    e = run_engine(k.g, p, dev4, program=0)
    prof = e.profile()
    assert intervals(prof) == {"a": [(0, 0, 1)], "b": [(0, 1, 2)], "c": [(0, 2, 3)],
                               "d": [(0, 3, 4)]}
    where = addresses(prof)
    assert where["a"] == where["c"] and where["b"] == where["d"]     # lifetimes never overlap
    assert len({where["a"], where["b"], where["x"], where["y"]}) == 4
    # two offsets of 4,000 B instead of four variables
    assert prof.memory_layout.shared_bytes[0] == 2 * B
    assert prof.memory["variables"][0] == 4 * B < 6 * B


def test_chain_results_do_not_change(dev4):
    k, p = chain(dev4)
    e = poplar.Engine(k.g, p)
    e.load(dev4)
    e.write_tensor("x", np.arange(N, dtype=np.float32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("y"), np.arange(N, dtype=np.float32) + 5)


def test_host_handles_keep_variables_always_live(dev4):
    k = Tile0(dev4)
    x, t, y = k.var("x"), k.var("t"), k.var("y")
    k.g.create_host_write("x", x)
    k.g.create_host_read("y", y[: N // 2])       # a view is enough
    prof = k.run(prog.Sequence([k.add_one(x, t), k.add_one(t, y)])).profile()
    assert intervals(prof) == {"t": [(0, 0, 1)]}
    assert prof.memory_layout.shared_bytes[0] == B


def test_read_before_write_in_any_program_is_always_live(dev4):
    k = Tile0(dev4)
    z, w = k.var("z"), k.var("w")
    writes_first = prog.Sequence([k.step(Fill, out=z), k.add_one(z, w)])
    reads_first = prog.Sequence([k.add_one(z, w)])          # needs z from an earlier run
    prof = k.run([writes_first, reads_first]).profile()
    assert "z" not in intervals(prof)
    assert intervals(prof)["w"] == [(0, 1, 1), (1, 2, 2)]   # written first in both programs
    # InOut reads: a variable bumped before anything writes it is always live
    prof = k.run([prog.Sequence([k.step(Bump, x=w), k.add_one(w, z)])]).profile()
    assert intervals(prof) == {"z": [(0, 1, 1)]}


def test_untouched_variables_are_always_live(dev4):
    k = Tile0(dev4)
    for name in "uvw":
        k.var(name)
    prof = k.run(prog.Sequence()).profile()
    assert intervals(prof) == {} and prof.memory_layout.shared_bytes[0] == 0
    assert prof.memory["variables"][0] == 3 * B


def test_loop_carried_variable_is_always_live_and_a_loop_temp_is_not_widened(dev4):
    k = Tile0(dev4)
    acc, t, u = k.var("acc"), k.var("t"), k.var("u")
    body = prog.Sequence([k.step(Bump, x=acc), k.step(Fill, out=t), k.add_one(t, u),
                          k.add_one(u, acc)])
    prof = k.run(prog.Repeat(3, body)).profile()
    # acc: first touch in the body is a read (its value from the last iteration): always live.
    # t, u: written first in every iteration, so dead between iterations: no widening
    assert intervals(prof) == {"t": [(0, 1, 2)], "u": [(0, 2, 3)]}


def test_loop_carried_variable_written_before_the_loop_lives_over_the_whole_loop(dev4):
    k = Tile0(dev4)
    acc, out = k.var("acc"), k.var("out")
    k.g.create_host_read("out", out)
    p = prog.Sequence([k.step(Fill, out=acc), prog.Repeat(4, k.step(Bump, x=acc)),
                       k.step(Fill, out=k.var("later")), k.add_one(acc, out)])
    prof = k.run(p).profile()
    assert intervals(prof) == {"acc": [(0, 0, 3)], "later": [(0, 2, 2)]}
    # 'later' is written while acc is still needed: they must not share
    where = addresses(prof)
    assert where["acc"] != where["later"]


def test_a_variable_read_first_in_a_loop_body_is_live_over_the_whole_loop(dev4):
    k = Tile0(dev4)
    t, u, s, y = k.var("t"), k.var("u"), k.var("s"), k.var("y")
    k.g.create_host_read("y", y)
    # t is written before the loop, read at the top of the body and rewritten for the next
    # iteration: its value must survive the rest of the body (s's lifetime) too
    body = prog.Sequence([k.add_one(t, u), k.step(Fill, out=t), k.step(Fill, out=s),
                          k.add_one(s, y)])
    prof = k.run(prog.Sequence([k.step(Fill, out=t), prog.Repeat(3, body)])).profile()
    assert intervals(prof) == {"t": [(0, 0, 4)], "u": [(0, 1, 1)], "s": [(0, 3, 4)]}
    where = addresses(prof)
    assert where["t"] != where["s"] and where["u"] == where["s"]


def test_a_branch_arm_that_may_not_run_keeps_its_variable_live_from_before(dev4):
    k = Tile0(dev4)
    pred = k.g.add_variable(poplar.INT, [1], "pred")
    k.g.set_tile_mapping(pred, 0)
    k.g.create_host_write("pred", pred)
    v, w, local, y = k.var("v"), k.var("w"), k.var("local"), k.var("y")
    k.g.create_host_read("y", y)
    # v is written only in the then-arm but read after the If: always live (if the arm does
    # not run, the read sees v's value from before); local and w live and die in the arm
    arm = prog.Sequence([k.step(Fill, out=v), k.step(Fill, out=local), k.add_one(local, w)])
    prof = k.run(prog.Sequence([prog.If(pred, arm), k.add_one(v, y)])).profile()
    assert intervals(prof) == {"local": [(0, 2, 3)], "w": [(0, 3, 3)]}


def test_a_while_body_may_not_run(dev4):
    k = Tile0(dev4)
    flag = k.g.add_variable(poplar.INT, [1], "flag")
    k.g.set_tile_mapping(flag, 0)
    k.g.create_host_write("flag", flag)
    v, w = k.var("v"), k.var("w")
    k.g.create_host_read("w", w)
    p = prog.Sequence([prog.RepeatWhileTrue(prog.Sequence(), flag, k.step(Fill, out=v)),
                       k.add_one(v, w)])
    assert intervals(k.run(p).profile()) == {}


def test_two_programs_share_between_them(dev4):
    k = Tile0(dev4)
    x, y = k.var("x"), k.var("y")
    k.g.create_host_write("x", x)
    k.g.create_host_read("y", y)
    p, q = k.var("p"), k.var("q")
    first = prog.Sequence([k.add_one(x, p), k.add_one(p, y)])
    second = prog.Sequence([k.add_one(x, q), k.add_one(q, y)])
    e = k.run([first, second], program=1)
    prof = e.profile()
    assert intervals(prof) == {"p": [(0, 0, 1)], "q": [(1, 2, 3)]}
    where = addresses(prof)
    assert where["p"] == where["q"]              # the programs never run at the same time
    assert prof.memory_layout.shared_bytes[0] == B
    live = prof.liveness()                       # the run of program 1: q live at both steps
    assert live["not_always_live"].tolist() == [B, B]


def test_tile_memory_places_shared_variables_at_their_offsets_after_the_variables():
    mem = TileMemory(2, 1000, 8, tiles=[0, 0], sizes=[10, 4],
                     categories=[CATEGORY["variables"], CATEGORY["code"]], owners=[0, 1],
                     owner_names=["v", "code", "a", "b"],
                     shared=([0, 0, 1], [20, 30, 5], [2, 3, 2], [0, 0, 0]))
    assert mem.allocations_on(0) == [(0, 4, "code", "code"), (8, 10, "variables", "v"),
                                     (24, 20, "variables", "a"), (24, 30, "variables", "b")]
    apart = TileMemory(1, 1000, 8, [], [], [], [], ["a", "b"],
                       shared=([0, 0], [20, 30], [0, 1], [0, 24]))
    assert apart.allocations_on(0) == [(0, 20, "variables", "a"), (24, 30, "variables", "b")]
    assert apart.shared_bytes.tolist() == [56]
    assert mem.allocations_on(1) == [(0, 5, "variables", "a")]
    assert mem.shared_bytes.tolist() == [32, 8]
    assert mem.as_dict()["variables"].tolist() == [16 + 32, 8]
    assert mem.total.tolist() == [56, 8]
    assert mem.largest_on(0) == [("b", 32), ("a", 24), ("v", 16), ("code", 8)]


def test_training_activations_live_from_forward_until_their_backward():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    tr = nn.Trainer(model, ipulab.devices.bow2000(tiles_per_ipu=16), batch_size=16,
                    input_shape=(1, 8, 8))
    rng = np.random.default_rng(0)
    tr.fit(rng.standard_normal((16, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 16))
    prof = tr.profile()
    live = intervals(prof)
    assert not {"0.weight", "0.bias", "4.weight", "4.bias"} & set(live)    # host handles
    # program 0 is the training step, program 1 evaluation (sharing the forward compute sets)
    (_, relu_first, relu_last), (_, eval_first, eval_last) = live["0.Conv2d/relu/out"]
    assert eval_first > relu_last                        # two intervals, one per program
    assert relu_last == live["0.Conv2d/relu_grad/out"][0][1]   # read last by the ReLU's grad
    assert "0.Conv2d/relu_grad/out" not in [name for name, root, *_ in prof.not_always_live()
                                            if root == 1]
    layout = prof.memory_layout
    members = (layout.owner_names[o] in live for o in layout.owner)
    unshared = int(layout.aligned[np.fromiter(members, bool, layout.owner.size)].sum())
    assert 0 < layout.shared_bytes.sum() < unshared       # some of them share addresses


# --- memory errors -----------------------------------------------------------------------------
def big_temporaries(dev, overlap: bool):
    """Two 400 KB temporaries on one tile (624 KiB): live together, or one after the other."""
    k = Tile0(dev, n=100_000)
    a, b, small = k.var("big_a"), k.var("big_b"), k.var("small", 2)
    k.g.create_host_read("small", small)
    if overlap:    # a is still needed when b is written
        seq = [k.step(Fill, out=a), k.step(Fill, out=b), k.add_one(a[:2], small),
               k.add_one(b[:2], small)]
    else:
        seq = [k.step(Fill, out=a), k.add_one(a[:2], small), k.step(Fill, out=b),
               k.add_one(b[:2], small)]
    return k.g, prog.Sequence(seq)


def test_temporaries_live_together_overflow(dev4):
    g, p = big_temporaries(dev4, overlap=True)
    with pytest.raises(TileMemoryError, match="tile 0") as ei:
        poplar.Engine(g, p)
    assert dict(ei.value.largest)["big_a"] == 400_000
    assert dict(ei.value.largest)["big_b"] == 400_000


def test_temporaries_live_at_different_times_fit(dev4):
    g, p = big_temporaries(dev4, overlap=False)
    prof = run_engine(g, p, dev4).profile()
    where = addresses(prof)
    assert where["big_a"] == where["big_b"]
    assert prof.memory_layout.shared_bytes[0] == 400_000
    assert prof.memory_layout.largest_on(0)[:2] == [("big_a", 400_000), ("big_b", 400_000)]
    assert prof.liveness()["peak_tile"].max() <= prof.memory_total[0] <= prof.bytes_per_tile


# --- the profile and the view ------------------------------------------------------------------
def test_profile_liveness_per_step(dev4):
    k, p = chain(dev4)
    prof = k.run(p).profile()
    live = prof.liveness()
    assert set(live) == {"always_live", "not_always_live", "total", "peak_tile"}
    assert live["not_always_live"].tolist() == [B, 2 * B, 2 * B, 2 * B, B]
    always = prof.memory_total - prof.memory["exchange_buffers"] - prof.memory_layout.shared_bytes
    assert (live["always_live"] == always.sum()).all()
    # no exchange on one tile: the total is always-live plus the live variables
    np.testing.assert_array_equal(live["total"], live["always_live"] + live["not_always_live"])
    np.testing.assert_array_equal(live["peak_tile"], live["total"])   # everything on tile 0
    assert live["peak_tile"].max() == prof.memory_total[0]


def test_a_step_run_at_two_positions_counts_where_it_ran(dev4):
    k = Tile0(dev4)
    x, t, y = k.var("x"), k.var("t"), k.var("y")
    k.g.create_host_write("x", x)
    k.g.create_host_read("y", y)
    fill = k.step(Fill, out=k.var("scratch"))
    # the same compute set twice: only the second time is t live
    p = prog.Sequence([fill, k.add_one(x, t), fill, k.add_one(t, y)])
    prof = k.run(p).profile()
    assert intervals(prof) == {"t": [(0, 1, 3)], "scratch": [(0, 0, 2)]}
    assert prof.liveness()["not_always_live"].tolist() == [B, 2 * B, 2 * B, B]


def test_repeat_steps_map_to_the_loop_positions(dev4):
    k = Tile0(dev4)
    x, y = k.var("x"), k.var("y")
    k.g.create_host_write("x", x)
    k.g.create_host_read("y", y)
    t = k.var("t")
    prof = k.run(prog.Repeat(3, prog.Sequence([k.add_one(x, t), k.add_one(t, y)]))).profile()
    assert prof.liveness()["not_always_live"].tolist() == [B] * 6


class CountDown(poplar.Vertex):
    n = poplar.InOut(poplar.INT)

    @staticmethod
    def compute(n):
        n[0] -= 1


def test_while_loop_steps_map_to_their_positions(dev4):
    k = Tile0(dev4)
    n = k.g.add_variable(poplar.INT, [1], "n")
    k.g.set_tile_mapping(n, 0)
    k.g.create_host_write("n", n)
    t, y = k.var("t"), k.var("y")
    k.g.create_host_read("y", y)
    cs = k.g.add_compute_set("count down")
    k.g.add_vertex(cs, CountDown, {"n": n}, tile=0)
    body = prog.Sequence([k.step(Fill, out=t), k.add_one(t, y)])
    e = poplar.Engine(k.g, prog.RepeatWhileTrue(prog.Execute(cs), n, body))
    e.load(dev4)
    e.write_tensor("n", np.array([3], np.int32))
    e.run()
    prof = e.profile()
    assert [r.kind for r in prof.steps] == ["execute", "control", "execute", "execute"] * 2 + \
        ["execute", "control"]
    assert intervals(prof) == {"t": [(0, 2, 3)]}     # count down 0, predicate 1, body 2-3
    assert prof.liveness()["not_always_live"].tolist() == [0, 0, B, B] * 2 + [0, 0]


def test_viz_liveness_shows_the_not_always_live_bytes(dev4):
    k, p = chain(dev4)
    prof = k.run(p).profile()
    fig = viz.liveness(prof)
    d = fig.select_one({"name": "liveness", "type": ColumnDataSource}).data
    np.testing.assert_array_equal(d["not_always_live"], prof.liveness()["not_always_live"])
    assert fig.select_one({"name": "not_always_live"}) is not None
    binned = viz.liveness(prof, max_points=2).select_one(
        {"name": "liveness", "type": ColumnDataSource}).data
    assert binned["not_always_live"].max() == 2 * B        # a bin keeps its peak


# --- property: lifetimes cover every value still needed; shared addresses never meet in time ---
@st.composite
def programs(draw):
    """Random programs of Sequences, Repeats and Ifs over a few variables on two tiles."""
    nvars = draw(st.integers(2, 5))
    sizes = draw(st.lists(st.integers(1, 300), min_size=nvars, max_size=nvars))
    ops = st.tuples(st.sampled_from(["fill", "add", "bump"]), st.integers(0, nvars - 1),
                    st.integers(0, nvars - 1))
    blocks = draw(st.lists(st.tuples(st.sampled_from(["seq", "repeat", "if"]),
                                     st.lists(ops, min_size=1, max_size=6)),
                           min_size=1, max_size=4))
    nroots = draw(st.integers(1, 2))
    host = draw(st.sets(st.integers(0, nvars - 1), max_size=2))
    taken = draw(st.booleans())
    return sizes, blocks, nroots, host, taken


class RandomProgram:
    """Builds the programs, and alongside, what each root does when it runs: per executed step
    its position and the variables it reads and writes (the test's own account)."""

    def __init__(self, dev, sizes, host):
        self.g, self.sizes, self.position = poplar.Graph(dev.target), sizes, 0
        self.vs = []
        for i, n in enumerate(sizes):
            self.vs.append(self.g.add_variable(F, [n], f"v{i}"))
            self.g.set_tile_mapping(self.vs[-1], i % 2)
        self.pred = self.g.add_variable(poplar.INT, [1], "pred")
        self.g.set_tile_mapping(self.pred, 0)
        self.g.create_host_write("pred", self.pred)
        for i in host:
            self.g.create_host_read(f"h{i}", self.vs[i])

    def op(self, kind, i, j):
        """(program, [(position, reads, writes)])"""
        cs, vs = self.g.add_compute_set(), self.vs
        if kind == "fill":
            self.g.add_vertex(cs, Fill, {"out": vs[i]}, tile=i % 2)
            touch = ((), (i,))
        elif kind == "bump":
            self.g.add_vertex(cs, Bump, {"x": vs[i]}, tile=i % 2)
            touch = ((i,), (i,))
        elif i != j:
            n = min(self.sizes[i], self.sizes[j])
            self.g.add_vertex(cs, AddOne, {"a": vs[i][:n], "b": vs[j][:n]}, tile=j % 2)
            touch = ((i,), (j,))
        else:
            return prog.Sequence(), []
        self.position += 1
        return prog.Execute(cs), [(self.position - 1, *touch)]

    def block(self, kind, ops, taken):
        if kind == "if":
            self.position += 1                       # the predicate's step
        parts = [self.op(*o) for o in ops]
        body, run = prog.Sequence([p for p, _ in parts]), [e for _, r in parts for e in r]
        if kind == "repeat":
            return prog.Repeat(2, body), run * 2
        if kind == "if":
            return prog.If(self.pred, body), run if taken else []
        return body, run


@given(programs())
@settings(max_examples=60)
def test_lifetimes_cover_needed_values_and_shared_addresses_never_meet(dev4, case):
    sizes, blocks, nroots, host, taken = case
    rp = RandomProgram(dev4, sizes, host)
    roots, runs = [], []
    for r in range(nroots):
        parts = [rp.block(kind, ops, taken) for kind, ops in (blocks[r::nroots] or blocks)]
        roots.append(prog.Sequence([p for p, _ in parts]))
        runs.append([e for _, run in parts for e in run])
    e = poplar.Engine(rp.g, roots)
    e.load(dev4)
    e.write_tensor("pred", np.array([int(taken)], np.int32))
    e.run()
    prof = e.profile()
    lifetimes: dict[str, dict] = {}
    for name, root, first, last in prof.not_always_live():
        lifetimes.setdefault(name, {})[root] = (first, last)

    # 1. a value read later sits in its variable's interval from its write to that read
    for r, run in enumerate(runs):
        last_write: dict[int, int] = {}
        for t, (pos, reads, writes) in enumerate(run):
            for v in reads:
                name = f"v{v}"
                if name not in lifetimes:
                    continue                           # always live: nothing to check
                assert v in last_write, f"{name} is read before written but not always live"
                first, last = lifetimes[name][r]
                held = [p for p, _, _ in run[last_write[v]:t + 1]]
                assert first <= min(held) and max(held) <= last, (name, r, held)
            for v in writes:
                last_write[v] = t

    # 2. allocations that share bytes on a tile are never live at the same position
    always = {r: (0, 10**9) for r in range(nroots)}
    layout = prof.memory_layout
    for tile in range(dev4.target.num_tiles):
        allocs = layout.allocations_on(tile)
        for i, (a0, n0, _, o0) in enumerate(allocs):
            for a1, n1, _, o1 in allocs[i + 1:]:
                if a0 < a1 + n1 and a1 < a0 + n0:
                    for r in range(nroots):
                        s0, e0 = lifetimes.get(o0, always).get(r, (-1, -2))
                        s1, e1 = lifetimes.get(o1, always).get(r, (-1, -2))
                        assert e0 < s1 or e1 < s0, (tile, o0, o1, r)
        # the tile's bytes end where its last allocation does: shared bytes count once
        assert layout.total[tile] == max((a + -(-n // 8) * 8 for a, n, _, _ in allocs), default=0)


def test_offsets_are_shared_across_tiles_and_times_but_not_both():
    """Variables live at the same time may take the same bytes on different tiles (pipeline
    stages on different IPUs), or on one tile at different times, never both at once; each
    tile is packed on its own."""
    from ipulab.poplar.liveness import assign_offsets

    start = np.array([[0], [0], [5], [10]])
    end = np.array([[9], [9], [7], [12]])
    # allocations: (variable, tile, bytes)
    var, tile, size = (np.array(x) for x in zip((0, 0, 64), (0, 1, 64), (1, 6, 64), (1, 7, 64),
                                                 (2, 1, 32), (3, 1, 64), (2, 2, 32)))
    offsets = assign_offsets(start, end, var, tile, size)
    assert offsets[:4].tolist() == [0, 0, 0, 0]    # same time, different tiles
    assert offsets[4] == 64                        # meets variable 0 on tile 1: above it
    assert offsets[5] == 0                         # tile 1 again, but after both have died
    assert offsets[6] == 0                         # variable 2 on tile 2 has it to itself
    crowded = assign_offsets(np.zeros((3, 1), np.int64), np.ones((3, 1), np.int64),
                             np.arange(3), np.zeros(3, np.int64), np.array([8, 24, 16]))
    assert sorted(crowded.tolist()) == [0, 24, 40]   # largest first, packed
