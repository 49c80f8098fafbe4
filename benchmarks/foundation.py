"""Foundation benchmarks: compute-set throughput, exchange bandwidth, compile time, import time.

Each figure is a ratio measured side by side in one run, against a numpy reference of the same
math (and against a per-vertex Python loop), so the table means the same on any machine.
"""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

import ipulab
from ipulab import poplar, poputil
from ipulab.poplar import program as prog


class Dot(poplar.Vertex):
    """out = a . b, summed in float32 in index order (bit-identical in every codelet mode)."""

    a = poplar.Input(poplar.Vector[poplar.FLOAT])
    b = poplar.Input(poplar.Vector[poplar.FLOAT])
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(a, b, out):
        s = np.float32(0)
        for i in range(len(a)):
            s += a[i] * b[i]
        out[0] = s

    @staticmethod
    def cycle_estimate(a, b, out):
        return 10 + (a + 1) // 2    # f32v2 multiply-accumulate: two elements per cycle


class DotSimd(Dot):
    """The same dot product with fast-math: LLVM sums in SIMD lanes (deterministic order)."""

    fastmath = True


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def dot_engine(codelet=Dot, n_vertices: int = 5888, n: int = 256, tile_step: int = 1,
               shift: int = 0) -> poplar.Engine:
    """A loaded Bow-2000 engine of one compute set: vertex v, on tile tile_step * v (mod the
    tiles, with row v of a, b and out), computes out[v] = a[v] . b[(v + shift) % n_vertices]
    (shift > 0: b's rows cross the exchange)."""
    dev = ipulab.devices.bow2000()
    g = poplar.Graph(dev.target)
    a = g.add_variable(poplar.FLOAT, [n_vertices, n], "a")
    b = g.add_variable(poplar.FLOAT, [n_vertices, n], "b")
    out = g.add_variable(poplar.FLOAT, [n_vertices], "out")
    cs = g.add_compute_set("dot")
    for v in range(n_vertices):
        tile = (tile_step * v) % dev.target.num_tiles
        for t in (a[v], b[v], out[v]):
            g.set_tile_mapping(t, tile)
        g.add_vertex(cs, codelet, {"a": a[v], "b": b[(v + shift) % n_vertices],
                                   "out": out[v]}, tile=tile)
    g.create_host_write("a", a), g.create_host_write("b", b), g.create_host_read("out", out)
    e = poplar.Engine(g, prog.Execute(cs))
    e.load(dev)
    return e


def bench_compute_set(codelet=Dot, n_vertices: int = 5888, n: int = 256):
    e = dot_engine(codelet, n_vertices, n)
    rng = np.random.default_rng(0)
    ha = rng.standard_normal((n_vertices, n), dtype=np.float32)
    hb = rng.standard_normal((n_vertices, n), dtype=np.float32)
    e.write_tensor("a", ha), e.write_tensor("b", hb)
    e.run()
    assert np.allclose(e.read_tensor("out"), np.einsum("ij,ij->i", ha, hb), rtol=1e-4, atol=1e-3)
    t_sim = best_of(e.run)
    t_np = best_of(lambda: np.einsum("ij,ij->i", ha, hb))
    py_dot = codelet.compute

    def python_loop():
        o = np.zeros(1, np.float32)
        for v in range(n_vertices):
            py_dot(ha[v], hb[v], o)
    t_py = best_of(python_loop, repeat=1)
    return t_sim, t_np, t_py


def bench_exchange(total_bytes: int = 64 * 2**20):
    dev = ipulab.devices.bow2000()
    T = dev.target.num_tiles
    n = total_bytes // 4
    g = poplar.Graph(dev.target)
    src = g.add_variable(poplar.FLOAT, [n], "src")
    dst = g.add_variable(poplar.FLOAT, [n], "dst")
    poputil.map_tensor_linearly(g, src)
    # destination chunks live on a random permutation of the tiles: every tile sends its chunk
    # to another tile (possibly on another IPU)
    chunks = np.array_split(np.arange(n), T)
    perm = np.random.default_rng(1).permutation(T)
    mapping = [[] for _ in range(T)]
    for i, c in enumerate(chunks):
        mapping[perm[i]].append((int(c[0]), int(c[-1]) + 1))
    g.set_tile_mapping(dst, mapping)
    g.create_host_write("src", src), g.create_host_read("dst", dst)
    t = time.perf_counter()
    e = poplar.Engine(g, prog.Copy(src, dst))
    t_compile = time.perf_counter() - t
    e.load(dev)
    host = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
    e.write_tensor("src", host)
    e.run()
    assert np.array_equal(e.read_tensor("dst"), host)
    t_sim = best_of(e.run)
    out = np.empty_like(host)
    t_np = best_of(lambda: np.copyto(out, host))
    return t_sim, t_np, t_compile, e.profile()


def bench_compile(n_vertices: int = 50_000):
    dev = ipulab.devices.bow2000()
    T = dev.target.num_tiles
    g = poplar.Graph(dev.target)
    n = 16
    a = g.add_variable(poplar.FLOAT, [n_vertices, n], "a")
    b = g.add_variable(poplar.FLOAT, [n_vertices, n], "b")
    out = g.add_variable(poplar.FLOAT, [n_vertices], "out")
    poputil.map_tensor_linearly(g, a, 0, n)
    poputil.map_tensor_linearly(g, b, 0, n)
    poputil.map_tensor_linearly(g, out, 0, 1)
    cs = g.add_compute_set("dot")
    tile_of = np.arange(n_vertices) * T // n_vertices
    t = time.perf_counter()
    for v in range(n_vertices):
        g.add_vertex(cs, Dot, {"a": a[v], "b": b[v], "out": out[v]}, tile=int(tile_of[v]))
    t_build = time.perf_counter() - t
    Dot_engine = poplar.Engine(g, prog.Execute(cs))  # warm the codelet's numba compile
    del Dot_engine
    t = time.perf_counter()
    poplar.Engine(g, prog.Execute(cs))
    return time.perf_counter() - t, t_build


def bench_import() -> float:
    code = ("import time; t = time.perf_counter(); import ipulab; ipulab.poplar, ipulab.nn; "
            "print(time.perf_counter() - t)")    # ipulab imports its parts when first used
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # warm cache
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> list[tuple]:
    rows = []
    for codelet, label in ((Dot, "strict order"), (DotSimd, "fastmath codelet")):
        t_sim, t_np, t_py = bench_compute_set(codelet)
        rows.append((f"compute set: 5,888 vertices x dot(256), {label}", f"{t_sim * 1e3:.2f} ms",
                     f"{t_sim / t_np:.2f}x numpy", "<= 1x numpy", t_sim / t_np <= 1))
        rows.append(("  vs per-vertex Python loop", f"{t_py * 1e3:.0f} ms",
                     f"{t_py / t_sim:.0f}x faster", ">= 50x faster", t_py / t_sim >= 50))
    t_sim, t_np, t_compile, profile = bench_exchange()
    bw = 64 * 2**20 / t_sim / 1e9
    rows.append(("exchange: 64 MB between random tile pairs", f"{t_sim * 1e3:.1f} ms",
                 f"{t_np / t_sim:.0%} of numpy copy ({bw:.1f} GB/s)", ">= 30%", t_np / t_sim >= 0.3))
    rows.append(("  its compile", f"{t_compile:.2f} s", f"{profile.total_cycles:,} sim cycles",
                 "", True))
    t_compile, t_build = bench_compile()
    rows.append(("compile: 5,888 tiles, 50,000 vertices", f"{t_compile:.2f} s",
                 f"(graph build {t_build:.2f} s)", "< 3 s", t_compile < 3))
    t_import = bench_import()
    rows.append(("import ipulab with poplar and nn (warm numba cache)", f"{t_import:.2f} s", "", "< 2 s",
                 t_import < 2))
    return rows


if __name__ == "__main__":
    from run import print_table
    print_table("Foundation", main())
