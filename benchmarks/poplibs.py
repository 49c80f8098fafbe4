"""PopLibs benchmarks (issue 4): mat_mul and conv2d on one Bow IPU.

Host wall time of engine.run() (compile excluded) against numpy's BLAS-backed reference of the
same math, measured side by side in one run, and the simulated utilisation: the product's FLOPs
over (simulated cycles x the preset's fp32 FLOP per cycle over all tiles).
"""
from __future__ import annotations

import time

import numpy as np

import ipulab
from foundation import best_of
from ipulab import poplar, poplin, poputil
from ipulab.poplar import program as prog


def _measure(g, seq, dev, inputs: dict, output: str, reference, flops: int, atol: float) -> dict:
    """Compile (timed), write the inputs, run, check against the numpy reference, then time
    engine.run() and the reference side by side; simulated utilisation of the fp32 peak."""
    t = time.perf_counter()
    e = poplar.Engine(g, seq)
    t_compile = time.perf_counter() - t
    e.load(dev)
    for handle, array in inputs.items():
        e.write_tensor(handle, array)
    e.run()
    assert np.allclose(e.read_tensor(output), reference(), rtol=1e-3, atol=atol)
    t_sim, t_np = best_of(e.run), best_of(reference)
    cycles = e.profile().total_cycles
    peak = dev.target.chip.fp32_flops_per_cycle_per_tile * dev.target.num_tiles
    return {"t_sim": t_sim, "t_np": t_np, "t_compile": t_compile, "cycles": cycles,
            "utilisation": flops / (cycles * peak)}


def bench_matmul(m: int = 1024, k: int = 1024, n: int = 1024, arch: str = "bow",
                 tiles_per_ipu: int | None = None) -> dict:
    """mat_mul of inputs made by create_mat_mul_input_lhs/rhs; checked against numpy."""
    dev = ipulab.devices.ipu(arch, tiles_per_ipu=tiles_per_ipu)
    g = poplar.Graph(dev.target)
    a = poplin.create_mat_mul_input_lhs(g, poplar.FLOAT, [m, k], [k, n], "a")
    b = poplin.create_mat_mul_input_rhs(g, poplar.FLOAT, [m, k], [k, n], "b")
    seq = prog.Sequence()
    c = poplin.mat_mul(g, a, b, seq, "c")
    g.create_host_write("a", a), g.create_host_write("b", b), g.create_host_read("c", c)
    rng = np.random.default_rng(0)
    ha = rng.standard_normal((m, k), dtype=np.float32)
    hb = rng.standard_normal((k, n), dtype=np.float32)
    result = _measure(g, seq, dev, {"a": ha, "b": hb}, "c", lambda: ha @ hb, 2 * m * k * n,
                      1e-3 * np.sqrt(k))
    result["plan"] = poplin.plan_mat_mul(dev.target, m, k, n)
    return result


def numpy_conv2d(x: np.ndarray, w: np.ndarray, padding: int) -> np.ndarray:
    """The reference: im2col with sliding_window_view, then one BLAS product."""
    n, c, h, w_ = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(c * kh * kw, -1)   # (c kh kw, n ho wo)
    out = w.reshape(o, -1) @ cols
    return out.reshape(o, n, win.shape[2], win.shape[3]).transpose(1, 0, 2, 3)


def bench_conv(batch: int = 8, channels: int = 16, size: int = 32, out_channels: int = 32,
               kernel: int = 3, arch: str = "bow", tiles_per_ipu: int | None = None) -> dict:
    """conv2d (padding keeps the size) of linearly mapped x and w; checked against numpy."""
    dev = ipulab.devices.ipu(arch, tiles_per_ipu=tiles_per_ipu)
    g = poplar.Graph(dev.target)
    xs, ws = (batch, channels, size, size), (out_channels, channels, kernel, kernel)
    x, w = g.add_variable(poplar.FLOAT, xs, "x"), g.add_variable(poplar.FLOAT, ws, "w")
    poputil.map_tensor_linearly(g, x), poputil.map_tensor_linearly(g, w)
    seq = prog.Sequence()
    pad = kernel // 2
    out = poplin.conv2d(g, x, w, seq, 1, pad, "conv")
    g.create_host_write("x", x), g.create_host_write("w", w), g.create_host_read("out", out)
    rng = np.random.default_rng(0)
    hx = rng.standard_normal(xs, dtype=np.float32)
    hw = rng.standard_normal(ws, dtype=np.float32)
    flops = 2 * int(np.prod(out.shape)) * channels * kernel * kernel
    result = _measure(g, seq, dev, {"x": hx, "w": hw}, "out", lambda: numpy_conv2d(hx, hw, pad),
                      flops, 1e-3 * kernel * np.sqrt(channels))
    result["plan"] = poplin.plan_conv2d(dev.target, xs, ws, 1, pad)
    return result


def main() -> list[tuple]:
    rows = []
    mm = bench_matmul()
    ratio = mm["t_sim"] / mm["t_np"]
    s = mm["plan"].split
    rows.append(("mat_mul 1024x1024x1024 fp32, one Bow IPU", f"{mm['t_sim'] * 1e3:.1f} ms",
                 f"{ratio:.2f}x numpy @", "<= 5x numpy", ratio <= 5))
    rows.append((f"  simulated: {mm['cycles']:,} cycles, split m{s.m} k{s.k} n{s.n}",
                 f"{mm['utilisation']:.1%}", "of fp32 peak", "> 50%", mm["utilisation"] > 0.5))
    rows.append(("  its compile", f"{mm['t_compile']:.1f} s", "", "", True))
    cv = bench_conv()
    ratio = cv["t_sim"] / cv["t_np"]
    rows.append(("conv2d 8x16x32x32 * 32x16x3x3, pad 1, one Bow IPU",
                 f"{cv['t_sim'] * 1e3:.1f} ms", f"{ratio:.2f}x numpy im2col @", "<= 5x numpy",
                 ratio <= 5))
    rows.append((f"  simulated: {cv['cycles']:,} cycles", f"{cv['utilisation']:.1%}",
                 "of fp32 peak", "report", True))
    rows.append(("  its compile", f"{cv['t_compile']:.1f} s", "", "", True))
    return rows


if __name__ == "__main__":
    from run import print_table
    print_table("PopLibs (issue 4)", main())
