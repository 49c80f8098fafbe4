"""Exercise set 08 · many IPUs: what a copy over IPU-Links costs, sharding with virtual graphs,
a data-parallel update with gcl.all_reduce, the ring's time on the links, and an embedding
table in streaming memory."""
import functools

import numpy as np

from .... import devices, gcl, poplar, poputil
from ....poplar import program as prog
from ..messages import Fail
from ..kit import Kit, call, compare, grade_par, predicted
from ..registry import Par, exercise_set, question
from .outputs import compare_filled, filled

exercise_set("ex08", "08_many_ipus.ipynb", "Many IPUs",
             "Price a copy over the IPU-Links, shard a matrix-vector product over two IPUs, "
             "average gradients over replicas, predict the ring all-reduce, and read an "
             "embedding table from streaming memory.")

TILES_PER_IPU = 4       # small IPUs: the links, syncs and streaming memory are full size


@functools.lru_cache(maxsize=None)
def _system(name: str):
    """A Bow-2000 or a Pod16 of small IPUs (devices are immutable: one of each is shared)."""
    return getattr(devices, name)(tiles_per_ipu=TILES_PER_IPU)


def _spread(n: int, ipu: int = 0) -> list:
    """A tile mapping list: n elements cut evenly over the tiles of one IPU."""
    lo = ipu * TILES_PER_IPU
    return [[] for _ in range(lo)] + [[(k * n // TILES_PER_IPU, (k + 1) * n // TILES_PER_IPU)]
                                      for k in range(TILES_PER_IPU)]


# --- 1 ---------------------------------------------------------------------------------------
LINK_N = 12_000


def _link_copy_profile():
    kit = Kit(dev=_system("bow2000"))
    a = kit.var("a", poplar.FLOAT, [LINK_N], tile=_spread(LINK_N, 0))
    b = kit.var("b", poplar.FLOAT, [LINK_N], tile=_spread(LINK_N, 1))
    kit.run(prog.Copy(a, b, name="IPU 0 -> IPU 1"))
    return kit.profile


@question(
    "ex08.link_copy", title="Predict: a copy from IPU 0 to IPU 1", kind="predict",
    statement=f"""
On a Bow-2000, `a` ({LINK_N:,} FLOAT values) is spread over the tiles of IPU 0, and one
`prog.Copy(a, b)` moves it to `b`, spread over the tiles of IPU 1. Predict the cycles of that
run, `profile.total_cycles`. Work it out from the cost model of notebook 08 (`bow.target`,
`bow.target.system.route`, `COST.ipu_link_latency_s`, `chip.ipu_link_bytes_per_second`), or
with the target's own functions — knowing which ones to add up is the point.
""",
    hints=[
        "A copy is one BSP superstep: a sync, then the exchange. Between two IPUs the exchange "
        "runs over the IPU-Links, and the sync must include every IPU.",
        "target.sync_cycles('external') is the barrier over all IPUs; target.link_cycles(bytes, "
        "0, 1) is hops × 200 ns + bytes ÷ (links × 13.6 GB/s), in cycles (rounded up).",
        f"bow.target.sync_cycles('external') + bow.target.link_cycles(4 * {LINK_N}, 0, 1).",
    ])
def _link_copy(answer):
    p = _link_copy_profile()
    t = _system("bow2000").target
    truth = int(p.total_cycles)
    nbytes = 4 * LINK_N
    link, sync = t.link_cycles(nbytes, 0, 1), t.sync_cycles("external")
    latency = t.cycles(t.cost.ipu_link_latency_s)
    one_link = t.cycles(t.cost.ipu_link_latency_s + nbytes / t.chip.ipu_link_bytes_per_second)
    return predicted(answer, truth, {
        t.sync_cycles("internal") + link:
            "that adds an on-chip (internal) sync. A step that crosses IPUs syncs all of them: "
            "target.sync_cycles('external').",
        link: "that is the time on the links only; every step starts with a sync (here an "
              "external one, over all IPUs).",
        sync + one_link: "that sends everything over one link. route(0, 1) says how many "
                         "links join the two IPUs; they carry the bytes in parallel.",
        sync + link - latency: "you left out the latency: each hop costs 200 ns "
                               f"({latency} cycles) on top of the bytes.",
        sync + t.link_cycles(nbytes * 8, 0, 1): "that counts bits; the link rate is in bytes "
                                                "per second.",
    }, tolerance=1)


# --- 2 ---------------------------------------------------------------------------------------
def _ipu_traffic(profile) -> np.ndarray:
    """Bytes sent from IPU a to IPU b over the run (as in notebook 08)."""
    src, dst, nbytes = profile.exchange_traffic()
    m = np.zeros((profile.num_ipus, profile.num_ipus), np.int64)
    np.add.at(m, (src // profile.tiles_per_ipu, dst // profile.tiles_per_ipu), nbytes)
    return m


def _cross_ipu_fields(kit, limit: int = 3) -> str:
    """The vertex fields whose data lives on another IPU, one line each."""
    tpi = kit.target.tiles_per_ipu
    lines, vertices = [], kit.g.get_vertices()
    for vid, field, name, _, tiles, writes in kit.remote_reads():
        own = vertices[vid].tile // tpi
        away = sorted({t // tpi for t in tiles} - {own})
        if away:
            verb = "writes" if writes else "reads"
            lines.append(f"{kit.vertex(vid)} {verb} {name} (field '{field}'), held on IPU "
                         f"{', '.join(map(str, away))}")
    more = f"\n    … and {len(lines) - limit} more" if len(lines) > limit else ""
    return "".join(f"\n    {line}" for line in lines[:limit]) + more


def _check_halves(kit, rows: int, cols: int) -> None:
    """Rows [0, rows/2) of A and y on IPU 0, the others on IPU 1."""
    half, tpi = rows // 2, kit.target.tiles_per_ipu
    want = np.where(np.arange(rows) < half, 0, 1)
    first, last = {0: 0, 1: half}, {0: half - 1, 1: rows - 1}
    for name, what, tiles in (("A", "rows", kit.tiles_of("A").reshape(rows, cols)),
                              ("y", "outputs", kit.tiles_of("y").reshape(rows, 1))):
        wrong = tiles // tpi != want[:, None]        # (compiling checked that all are mapped)
        if wrong.any():
            i, j = np.argwhere(wrong)[0]
            ipu = int(want[i])
            index = f"{i}, {j}" if name == "A" else f"{i}"
            raise Fail(f"with {rows} rows, {name}[{index}] is on tile "
                       f"{kit.tile(int(tiles[i, j]))}, but {what} {first[ipu]} to {last[ipu]} "
                       f"belong on IPU {ipu}: each IPU holds exactly its half "
                       f"({int(wrong.any(axis=1).sum())} of the {what} are on the wrong IPU).")


@question(
    "ex08.shard_matvec", title="Shard a matrix-vector product over two IPUs", kind="graph",
    statement=f"""
`g` is the graph of a Bow-2000 ({TILES_PER_IPU} tiles per IPU). Write `shard_matvec(g, A, x, y)`
returning a program for `y = A·x` (`A` is R × C, R even) sharded over **IPU 0 and IPU 1**:
rows `0 … R/2 − 1` of `A` and their outputs `y[i]` live on IPU 0, the other half on IPU 1 (use
`g.create_virtual_graph` for each IPU). `x` is spread over IPU 0's tiles for you. Each row is
one `Dot` vertex on the tile of its row. Only `x` may cross the IPU-Links, and only **once**.
The check runs two shapes, three inputs each.
""",
    hints=[
        "ipu0 = g.create_virtual_graph(0, T) and ipu1 = g.create_virtual_graph(T, 2 * T), with "
        "T = g.target.tiles_per_ipu: tile 0 of ipu1 is tile T of g. Map each half of A and y "
        "with the virtual graph of its IPU.",
        "A Dot vertex on IPU 1 connected to x (on IPU 0) fetches its own copy of x over the "
        "links — one per vertex. Make one copy instead: a variable x1 on IPU 1 (careful: "
        "clone() keeps the mapping of x, on IPU 0) and prog.Copy(x, x1) before the compute set.",
        "x1 = ipu1.add_variable(poplar.FLOAT, [C]); poputil.map_tensor_linearly(ipu1, x1); for row "
        "i: vg = ipu0 or ipu1, t = a tile of vg; vg.set_tile_mapping(A[i], t), the same for "
        "y[i]; vg.add_vertex(cs, Dot, {'a': A[i], 'x': x or x1, 'out': y[i]}, tile=t); return "
        "prog.Sequence([prog.Copy(x, x1), prog.Execute(cs)]).",
    ])
def _shard_matvec(build):
    rng = np.random.default_rng(802)
    for rows, cols in ((16, 32), (10, 24)):
        kit = Kit(dev=_system("bow2000"))
        A = kit.var("A", poplar.FLOAT, [rows, cols])
        x = kit.var("x", poplar.FLOAT, [cols], tile=_spread(cols))
        y = kit.var("y", poplar.FLOAT, [rows], read=True)
        kit.compile(call(build, kit.g, A, x, y, what="shard_matvec(g, A, x, y)"))
        for run in range(3):
            a_host = rng.standard_normal((rows, cols)).astype(np.float32)
            x_host = rng.standard_normal(cols).astype(np.float32)
            got = kit.run(A=a_host, x=x_host, y=filled(rows))["y"]
            compare_filled(kit, "y", got, a_host.astype(np.float64) @ x_host, rtol=1e-4,
                           atol=1e-4, case=f" (A of {rows} × {cols}, run {run + 1} of 3)")
        _check_halves(kit, rows, cols)
        traffic = _ipu_traffic(kit.profile)
        off = traffic - np.diag(np.diag(traffic))
        once = 4 * cols
        if off[0, 1] > once:
            raise Fail(f"correct, but x crossed the IPU-Links more than once: {off[0, 1]:,} bytes "
                       f"went from IPU 0 to IPU 1, and x is {once:,} bytes. Every vertex on IPU 1 "
                       "connected to data on IPU 0 gets its own copy over the links:"
                       f"{_cross_ipu_fields(kit)}\n  Fix: copy x ONCE into a variable on IPU 1 "
                       "(prog.Copy), and connect IPU 1's vertices to that copy.")
        off[0, 1] = 0
        if off.any():
            a, b = np.argwhere(off)[0]
            raise Fail(f"correct, but {int(off[a, b]):,} bytes went from IPU {a} to IPU {b}; only "
                       f"x may cross, from IPU 0 to IPU 1:{_cross_ipu_fields(kit)}")
    return "correct for both shapes; each IPU holds its half, and only x crossed, once"


# --- 3 ---------------------------------------------------------------------------------------
def _replica_diff(out: np.ndarray):
    """(replica, element) of the first value that differs, in bits, from replica 0's, or None."""
    bits = out.view(np.uint32)
    bad = np.argwhere(bits != bits[0])
    return tuple(int(v) for v in bad[0]) if bad.size else None


@question(
    "ex08.sgd_step", title="Data parallel: one update, the same on every replica", kind="graph",
    statement="""
`g` is a **replicated** graph (`g.replication_factor` = r replicas). Each replica holds the same
weights `w` and its own gradient `grad` (computed from its own batch). Write
`sgd_step(g, w, grad, lr, seq)`: append to `seq` the programs that update `w` in place with the
**mean** gradient over all replicas, `w ← w − lr · mean_r(grad)`, so that every replica ends
with the same weights, bit for bit. The check runs r = 4 and r = 2 on a Bow-2000.
""",
    hints=[
        "The graph describes ONE replica: whatever you build runs on every replica with its own "
        "data. Only a collective from gcl combines the replicas.",
        "gcl.all_reduce(g, grad, 'add', seq) returns the SUM over the replicas (the same bits on "
        "all of them); the mean divides it by g.replication_factor.",
        "total = gcl.all_reduce(g, grad, 'add', seq, 'grads'); popops.scaled_subtract_from(g, w, "
        "total, lr / g.replication_factor, seq).",
    ])
def _sgd_step(step):
    rng = np.random.default_rng(803)
    for r, n, lr in ((4, 40, 0.5), (2, 29, 0.25)):
        kit = Kit(dev=_system("bow2000"), replication_factor=r)
        w = kit.var("w", poplar.FLOAT, [n], read=True)
        grad = kit.var("grad", poplar.FLOAT, [n])
        poputil.map_tensor_linearly(kit.g, w)
        poputil.map_tensor_linearly(kit.g, grad)
        seq = prog.Sequence()
        call(step, kit.g, w, grad, lr, seq, what="sgd_step(g, w, grad, lr, seq)")
        kit.compile(seq)
        case = f" (r = {r} replicas, lr = {lr})"
        for _ in range(2):
            w0 = rng.standard_normal(n).astype(np.float32)
            grads = rng.standard_normal((r, n)).astype(np.float32)
            out = kit.run(w=np.broadcast_to(w0, (r, n)), grad=grads)["w"]
            local = w0.astype(np.float64) - lr * grads
            diff = _replica_diff(out)
            if diff is not None:
                k, i = diff
                own = np.allclose(out, local, rtol=1e-5, atol=1e-6)
                raise Fail(
                    f"the replicas disagree{case}: w[{i}] is {out[0, i]:.7g} on replica 0 but "
                    f"{out[k, i]:.7g} on replica {k}. "
                    + ("Each replica updated w with its OWN gradient only. " if own else "")
                    + "Data-parallel training combines the gradients of all replicas before "
                    "the update: gcl.all_reduce(g, grad, 'add', seq).")
            total = grads.astype(np.float64).sum(axis=0)
            want = w0 - lr * total / r
            twice = (f"w came out about {r} times too big: you all-reduced the weights, adding "
                     "up r copies of them. All-reduce the gradients, then update.")
            known = [
                (w0 - lr * total, f"your step is {r} times too big: all_reduce ADDS the "
                 f"replicas' gradients; the mean divides by g.replication_factor ({r})."),
                (r * w0 - lr * total / r, twice),
                (r * w0 - lr * total, twice),
                (w0, "w did not change: update it in place, in seq (popops.scaled_subtract_"
                 "from(g, w, ...) or popops.sub_in_place)."),
            ]
            if not np.allclose(out[0], want, rtol=1e-5, atol=1e-6):
                for value, why in known:
                    if np.allclose(out[0], value, rtol=1e-5, atol=1e-6):
                        raise Fail(f"every replica holds the same w{case}, but {why}")
            compare(kit, "w", out[0], want, rtol=1e-5, atol=1e-6, case=case + " on replica 0")
    return "correct for r = 4 and r = 2; every replica holds the same bits"


# --- 4 ---------------------------------------------------------------------------------------
RING_R, RING_N = 16, 6_000


@question(
    "ex08.ring_cycles", title="Predict: the ring all-reduce on a Pod16", kind="predict",
    statement=f"""
`gcl.all_reduce` of a tensor of {RING_N:,} FLOAT values over **{RING_R} replicas on a Bow Pod16**,
one per IPU (replica j on IPU j, its ring neighbour replica j + 1 mod {RING_R}). Predict its time
on the IPU-Links, `profile.phase_totals()['inter_ipu_exchange']`.
""",
    hints=[
        "A ring all-reduce is a reduce-scatter and an all-gather of r − 1 exchanges each. In "
        "every exchange each replica sends ONE chunk of ⌈n / r⌉ values to the next replica.",
        "All pairs of the ring send at the same time, so an exchange lasts as long as its "
        "slowest pair. Look at pod.target.system.route(j, (j + 1) % 16) for every j: one pair "
        "is much further apart than the others.",
        f"2 × (r − 1) × max over j of pod.target.link_cycles(4 × ⌈{RING_N} / {RING_R}⌉, j, "
        f"(j + 1) % {RING_R}).",
    ])
def _ring_cycles(answer):
    r, n = RING_R, RING_N
    pod = _system("pod16")
    kit = Kit(dev=pod, replication_factor=r)
    t = kit.var("t", poplar.FLOAT, [n])
    poputil.map_tensor_linearly(kit.g, t)
    seq = prog.Sequence()
    gcl.all_reduce_in_place(kit.g, t, "add", seq, "ring")
    kit.run(seq)
    truth = int(kit.profile.phase_totals()["inter_ipu_exchange"])
    target = pod.target
    chunk = 4 * -(-n // r)
    pairs = [target.link_cycles(chunk, j, (j + 1) % r) for j in range(r)]
    return predicted(answer, truth, {
        2 * (r - 1) * min(pairs):
            "that prices every exchange at one hop. The ring closes from IPU 15 back to IPU 0: "
            "route(15, 0) has 4 hops, and every exchange waits for that slowest pair.",
        (r - 1) * max(pairs): "that is the reduce-scatter only; the all-gather takes r − 1 more "
                              "exchanges.",
        2 * (r - 1) * target.link_cycles(4 * n, r - 1, 0):
            "that sends the whole tensor in every exchange; each step moves one chunk of "
            "⌈n / r⌉ values.",
        2 * (r - 1) * sum(pairs): "the pairs of the ring send at the SAME time: an exchange lasts "
                                  "as long as its slowest pair, not the sum of all pairs.",
    }, tolerance=2 * (r - 1))


# --- 5 ---------------------------------------------------------------------------------------
BAG_ROWS, BAG_WIDTH, BAG_IDS = 64, 256, 12
BAG_PAR = Par(cycles=4023)


@question(
    "ex08.embedding_bag", title="Performance: rows of an embedding table in streaming memory",
    kind="performance",
    statement=f"""
An embedding table of {BAG_ROWS} rows × {BAG_WIDTH} FLOAT values lives in the **streaming
memory** of a Bow-2000: `table`, a remote buffer with {BAG_ROWS} repeats of {BAG_WIDTH} elements.
`ids` is an INT tensor of {BAG_IDS} row numbers on the device (an id may repeat), written by the
host before each run. Write `embedding_bag(g, table, ids, seq)`: append programs to `seq` and
return a new [{BAG_WIDTH}] tensor holding `table[ids[0]] + … + table[ids[{BAG_IDS - 1}]]`. `g` is
the virtual graph of IPU 0 ({TILES_PER_IPU} tiles). **Par**: {BAG_PAR.cycles:,} cycles, within
1.2×.
""",
    par=BAG_PAR,
    hints=[
        "Every copy to or from streaming memory pays an external sync and the streaming latency "
        "(1 µs, 1,850 cycles) whatever its size; the bytes themselves are cheap next to that.",
        "The offset of prog.Copy(table, rows, offset) may have k elements: it copies the k rows "
        "they name, in one step, into a tensor of k × width elements. Your ids are such a tensor. "
        "Then add the rows up on the tiles (popops.reduce), with the work spread over the tiles.",
        "rows = g.add_variable(poplar.FLOAT, [k, width]); map every rows[j] with "
        "poputil.map_tensor_linearly(g, rows[j]); seq.add(prog.Copy(table, rows, ids)); return "
        "popops.reduce(g, rows, [0], 'add', seq).",
    ])
def _embedding_bag(build):
    rng = np.random.default_rng(805)
    kit = Kit(dev=_system("bow2000"))
    ipu0 = kit.g.create_virtual_graph(0, TILES_PER_IPU)
    table = ipu0.add_remote_buffer("table", poplar.FLOAT, BAG_WIDTH, repeats=BAG_ROWS)
    kit.var("ids", poplar.INT, [BAG_IDS], tile=0)
    seq = prog.Sequence()
    out = call(build, ipu0, table, kit.tensors["ids"], seq,
               what="embedding_bag(g, table, ids, seq)")
    if not isinstance(out, poplar.Tensor) or tuple(out.shape) != (BAG_WIDTH,):
        raise Fail(f"embedding_bag should return a tensor of shape [{BAG_WIDTH}], got "
                   f"{getattr(out, 'shape', type(out).__name__)}")
    kit.tensors["bag"] = out
    kit.reads.append("bag")
    kit.compile(seq)
    values = rng.standard_normal((BAG_ROWS, BAG_WIDTH)).astype(np.float32)
    kit.engine.write_remote_buffer("table", values)
    for _ in range(3):
        ids = rng.integers(0, BAG_ROWS, BAG_IDS).astype(np.int32)
        ids[-1] = ids[0]                                       # a repeated id counts twice
        got = kit.run(ids=ids, bag=filled(BAG_WIDTH))["bag"]
        if np.array_equal(got, values[0]) and not (ids == 0).all():
            raise Fail("your result is row 0 of the table: a Copy from a remote buffer without "
                       "an offset moves row 0. Pass the ids as the offset.")
        compare_filled(kit, "bag", got, values[ids].astype(np.float64).sum(axis=0), rtol=1e-4,
                       atol=1e-4, case=f" (ids {ids.tolist()})")
    p = kit.profile
    t = kit.target
    copies = [s for s in p.steps if s.kind == "remote_copy"]
    streamed = sum(int(dict(s.phases)["host_exchange"].max()) for s in copies)
    needed = t.streaming_cycles(4 * BAG_IDS * BAG_WIDTH)
    report = grade_par(p, BAG_PAR, (
        f"\n  Your program copied to or from streaming memory {len(copies)} time(s), for "
        f"{streamed:,} cycles in all (each copy also pays an external sync); the {BAG_IDS} rows you need, in "
        f"one copy, take {needed:,}."))
    return f"correct; {report.text}", {"cycles": report.cycles}
