"""Training benchmarks (issue 5): the default CNN's training step on simulated IPUs.

(a) one training step of nn.default_cnn() on a full Bow-2000, 4 replicas x 16 images, against
    what a user would pick instead, PyTorch on the CPU (the same network, batch and optimizer;
    `make bench` installs it), and the numpy reference of the same math (tests/nn_reference.py in
    float32: forward, backward and SGD with momentum for the same 64 images), side by side in
    one run; and a step on a Pod16 (16 replicas x 16);
(b) one epoch of digits (1,437 training images: 22 steps of 64): building the Trainer (graph
    and compile) and Trainer.fit;
(c) how the cost grows from 1 IPU to a Bow-2000 (4) and a Pod16 (16), one replica of 16 images
    per IPU: simulated cycles and images/s, IPU-Link bytes per step, host wall time per step.

Step times are taken inside Trainer.fit (a callback stamps the clock after every step) and the
best step is reported, so neither the compile nor the first, cold step counts.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import ipulab
from foundation import best_of
from ipulab import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from nn_reference import Reference  # noqa: E402

LR, MOMENTUM, BATCH = 0.1, 0.9, 16
SYSTEMS = {"1 IPU (Bow)": lambda tpi: ipulab.devices.ipu("bow", tiles_per_ipu=tpi),
           "Bow-2000 (4 IPUs)": ipulab.devices.bow2000,
           "Pod16 (16 IPUs)": ipulab.devices.pod16}


@contextmanager
def cache_off():
    """The executable cache switched off for a while (IPULAB_CACHE as it was afterwards)."""
    before = os.environ.get("IPULAB_CACHE")
    os.environ["IPULAB_CACHE"] = "off"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("IPULAB_CACHE", None)
        else:
            os.environ["IPULAB_CACHE"] = before


def bench_training(device, replicas: int, epochs: int = 1, batch_size: int = BATCH,
                   samples: int | None = None) -> dict:
    """Build a Trainer (timed), fit digits (the first `samples` of them, or all) for `epochs`
    in order (timed, every step stamped), and check the first step's loss against the float32
    numpy reference of the same batch."""
    x, y, _, _ = ipulab.data.digits()
    x, y = x[:samples], y[:samples]
    model = nn.default_cnn()
    model.reset_parameters(0)
    weights = {k: v.copy() for k, v in model.state_dict().items()}
    with cache_off():                  # time the build itself, not a cached executable
        t = time.perf_counter()
        tr = nn.Trainer(model, device, replicas=replicas, batch_size=batch_size, lr=LR,
                        momentum=MOMENTUM, input_shape=x.shape[1:])
        t_build = time.perf_counter() - t
    stamps = []
    t = time.perf_counter()
    h = tr.fit(x, y, epochs, shuffle=False,
               callback=lambda *_: stamps.append(time.perf_counter()))
    t_fit = time.perf_counter() - t
    gb = tr.global_batch_size
    ref = Reference(model, weights, LR, MOMENTUM, np.float32)
    loss, _ = ref.step(x[:gb], y[:gb])
    assert abs(h["loss"][0] - loss) <= 1e-4 * max(1.0, abs(loss)), (h["loss"][0], loss)
    summary = tr.profile().step_summary()
    return {"t_build": t_build, "t_fit": t_fit, "steps": len(stamps),
            "t_step": float(np.diff(stamps).min()) if len(stamps) > 1 else t_fit,
            "cycles": summary["step_cycles"], "ipu_link_bytes": summary["ipu_link_bytes"],
            "images_per_second": gb / summary["step_seconds"], "global_batch": gb}


def reference_step_time(global_batch: int, repeat: int = 50) -> float:
    """Best wall time of one float32 numpy training step (forward, loss, backward, SGD with
    momentum) of the default CNN on global_batch digits."""
    x, y, _, _ = ipulab.data.digits()
    model = nn.default_cnn()
    model.reset_parameters(0)
    ref = Reference(model, model.state_dict(), LR, MOMENTUM, np.float32)
    xb, yb = x[:global_batch], y[:global_batch]
    ref.step(xb, yb)
    assert ref.w["0.weight"].dtype == np.float32
    return best_of(lambda: ref.step(xb, yb), repeat)


def torch_step_time(global_batch: int, repeat: int = 100) -> float | None:
    """Best wall time of PyTorch's training step of the same CNN on the CPU, or None without
    PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y, _, _ = ipulab.data.digits()
    xb, yb = torch.from_numpy(x[:global_batch]), torch.from_numpy(y[:global_batch]).long()
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
    for _ in range(10):
        step()
    return best_of(step, repeat)


def scaling(tiles_per_ipu: int | None = None, samples: int | None = None) -> list[tuple]:
    """One epoch per system, one replica of 16 images per IPU: (system, its figures)."""
    rows = []
    for name, make in SYSTEMS.items():
        device = make(tiles_per_ipu)
        rows.append((name, bench_training(device, device.target.num_ipus, samples=samples)))
    return rows


def main(tiles_per_ipu: int | None = None, samples: int | None = None,
         repeat: int = 50) -> tuple[list[tuple], list[tuple]]:
    """The two tables: (a) and (b) against their targets, and (c) the scaling table.
    (tiles_per_ipu and samples shrink the run, for the smoke test.)"""
    rows = scaling(tiles_per_ipu, samples)
    bow, pod = dict(rows)["Bow-2000 (4 IPUs)"], dict(rows)["Pod16 (16 IPUs)"]
    t_ref = reference_step_time(bow["global_batch"], repeat)
    t_torch = torch_step_time(bow["global_batch"], 2 * repeat)
    against = t_torch or t_ref
    ratio = bow["t_step"] / against
    versus = "PyTorch CPU" if t_torch else "numpy float32 (no PyTorch: `make bench` installs it)"
    targets = [
        ("training step, default CNN, Bow-2000, 4 replicas x 16", f"{bow['t_step'] * 1e3:.1f} ms",
         f"{ratio:.2f}x {versus} @ {against * 1e3:.2f} ms", "<= 3x", ratio <= 3),
        ("  numpy float32 reference of the same step", f"{t_ref * 1e3:.2f} ms",
         f"(the step is {bow['t_step'] / t_ref:.2f}x)", "", True),
        ("training step, Pod16, 16 replicas x 16", f"{pod['t_step'] * 1e3:.1f} ms", "",
         "<= 15 ms", pod["t_step"] <= 0.015),
        (f"one epoch of digits ({bow['steps']} steps of {bow['global_batch']}): Trainer + fit()",
         f"{bow['t_build'] + bow['t_fit']:.1f} s", "", "< 60 s",
         bow["t_build"] + bow["t_fit"] < 60),
        ("  of which fit()", f"{bow['t_fit']:.2f} s", "", "", True),
        ("  of which the Trainer (graph and compile)", f"{bow['t_build']:.1f} s", "", "", True),
    ]
    table = [("system", "replicas x batch", "cycles/step", "simulated images/s",
              "IPU-Link bytes/step", "wall ms/step", "wall vs 1 IPU", "build s")]
    one = rows[0][1]["t_step"]
    for name, r in rows:
        table.append((name, f"{r['global_batch'] // BATCH} x {BATCH}", f"{r['cycles']:,}",
                      f"{r['images_per_second']:,.0f}", f"{r['ipu_link_bytes']:,}",
                      f"{r['t_step'] * 1e3:.1f}", f"{r['t_step'] / one:.1f}x",
                      f"{r['t_build']:.1f}"))
    return targets, table


if __name__ == "__main__":
    from run import print_columns, print_table
    targets, table = main()
    print_table("Training (issue 5)", targets)
    print_columns("Training: cost from 1 to 16 IPUs (one replica of 16 per IPU)", table)
