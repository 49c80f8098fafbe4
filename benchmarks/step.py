"""A training step side by side with PyTorch (issue 23: faster than a learner notices).

The default CNN's training step (4 replicas x 16 on a Bow-2000, 16 x 16 on a Pod16) and the
course's small GPT's (nn.small_gpt() on one Bow IPU, 16 sequences of sort_tokens, Adam)
against PyTorch on the CPU doing the same step on the same samples (the same network, batch
and optimizer; `make bench` installs PyTorch, which uses as many threads as the simulator's
lanes may), in turns, a few rounds: each round takes the best step of a run of steps of the
simulator and the best of PyTorch's steps, and the table gives the median round's ratio, so a
machine that is busy now and then moves both sides alike. Also: what a step costs per image
on a Pod16 against a Bow-2000 (sixteen replicas should cost no more per image than four).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

import ipulab
from foundation import best_of
from ipulab import nn
from ipulab.machine import lanes
from training import BATCH, LR, MOMENTUM, torch_step_time

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

BOUNDS = {"bow2000": 2.0, "pod16": 3.0, "gpt": 3.0}     # x PyTorch on the same global batch
PER_IMAGE_BOUND = 1.25                      # Pod16 per image, x Bow-2000 per image
# Steps a round takes the best of: as many for every system, or a Pod16's epoch of digits (4
# steps of 256) would be a best of 4 against a Bow-2000's of 21 and PyTorch's of 50.
STEPS = 20
GPT_LR = 0.001
NAMES = {"bow2000": "default CNN, Bow-2000, 4 replicas x 16",
         "pod16": "default CNN, Pod16, 16 replicas x 16",
         "gpt": "small GPT, one Bow IPU, 16 x 32 tokens, Adam"}


def trainer(system: str, tiles_per_ipu=None) -> nn.Trainer:
    """The CNN's trainer on a system ("bow2000", "pod16"), or the small GPT's ("gpt")."""
    if system == "gpt":     # (its activations need 32 tiles at least)
        dev = ipulab.devices.ipu("bow", tiles_per_ipu=tiles_per_ipu and max(tiles_per_ipu, 32))
        x = ipulab.data.sort_tokens()[0]
        return nn.Trainer(nn.small_gpt(), dev, batch_size=16, lr=GPT_LR, optimizer="adam",
                          input_shape=x.shape[1:])
    dev = ipulab.devices.system(system, tiles_per_ipu)
    x, _, _, _ = ipulab.data.digits()
    return nn.Trainer(nn.default_cnn(), dev, replicas=dev.target.num_ipus, batch_size=BATCH,
                      lr=LR, momentum=MOMENTUM, input_shape=x.shape[1:])


def _data(system: str):
    return ipulab.data.sort_tokens()[:2] if system == "gpt" else ipulab.data.digits()[:2]


def best_step(tr: nn.Trainer, system: str, steps: int | None = None) -> float:
    """The best wall time of one step over an epoch of digits, at least STEPS of them (the
    digits again from the start where an epoch has fewer), or STEPS steps of the GPT (every
    step stamped)."""
    x, y = _data(system)
    gb = tr.global_batch_size
    if steps is None:
        steps = STEPS if system == "gpt" else max(STEPS, len(x) // gb - 1)
    at = np.arange((steps + 1) * gb) % len(x)
    stamps = []
    tr.fit(x[at], y[at], shuffle=False, callback=lambda *_: stamps.append(time.perf_counter()))
    return float(np.diff(stamps).min())


def torch_gpt_step_time(repeat: int = 50) -> float | None:
    """Best wall time of PyTorch's training step of the small GPT on the CPU (the same
    architecture: torch.nn.TransformerEncoderLayer, batch_first, norm_first, GELU, causal;
    Adam; cross-entropy over every token), or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    from transformer_reference import gpt
    torch.manual_seed(0)
    _, model = gpt(64, 32, 64, 4, 256)
    opt = torch.optim.Adam(model.parameters(), lr=GPT_LR)
    x, y = _data("gpt")
    xb = torch.as_tensor(x[:16], dtype=torch.long)
    yb = torch.as_tensor(y[:16], dtype=torch.long).reshape(-1)

    def step():
        opt.zero_grad()
        logits = model(xb)
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb).backward()
        opt.step()
    for _ in range(10):
        step()
    return best_of(step, repeat)


def _torch_time(system: str, tr: nn.Trainer, repeat: int) -> float | None:
    if system == "gpt":
        return torch_gpt_step_time(repeat)
    return torch_step_time(tr.global_batch_size, repeat)


def measure(systems=("bow2000", "pod16", "gpt"), rounds: int = 5, tiles_per_ipu=None,
            steps: int | None = None, repeat: int = 50) -> dict:
    """Per system: the step's and PyTorch's best times and their ratio in each round."""
    trainers = {s: trainer(s, tiles_per_ipu) for s in systems}
    out = {s: {"sim": [], "torch": [], "ratio": [], "global_batch": tr.global_batch_size}
           for s, tr in trainers.items()}
    for s, tr in trainers.items():
        best_step(tr, s, steps)                            # warm: first steps, caches
    for _ in range(rounds):
        for s, tr in trainers.items():
            t_sim = best_step(tr, s, steps)
            t_torch = _torch_time(s, tr, repeat)
            r = out[s]
            r["sim"].append(t_sim)
            r["torch"].append(t_torch)
            r["ratio"].append(t_sim / t_torch if t_torch else float("nan"))
    return out


def main(quick: bool = False) -> list[tuple]:
    """The table (quick: small IPUs and few steps, for the smoke test)."""
    m = measure(rounds=1 if quick else 5, tiles_per_ipu=8 if quick else None,
                steps=2 if quick else None, repeat=2 if quick else 50)
    rows = []
    for s, r in m.items():
        ratio = statistics.median(r["ratio"])
        i = r["ratio"].index(sorted(r["ratio"])[(len(r["ratio"]) - 1) // 2])
        torch = "PyTorch CPU" if r["torch"][i] else "no PyTorch (`make bench` installs it)"
        rows.append((f"training step, {NAMES[s]}",
                     f"{r['sim'][i] * 1e3:.2f} ms",
                     f"{ratio:.2f}x {torch} @ {(r['torch'][i] or 0) * 1e3:.2f} ms "
                     f"(rounds: {', '.join(f'{x:.2f}' for x in r['ratio'])})",
                     f"<= {BOUNDS[s]:.0f}x", ratio <= BOUNDS[s]))
    per_image = {s: min(r["sim"]) / r["global_batch"] for s, r in m.items()}
    growth = per_image["pod16"] / per_image["bow2000"]
    rows.insert(2, ("  per image: Pod16 vs Bow-2000",
                    f"{per_image['pod16'] * 1e6:.1f} vs {per_image['bow2000'] * 1e6:.1f} us",
                    f"{growth:.2f}x", f"<= {PER_IMAGE_BOUND}x", growth <= PER_IMAGE_BOUND))
    rows.append((f"  (the simulator's lanes: {lanes.available()} threads)", "", "", "", True))
    return rows


if __name__ == "__main__":
    from run import print_table
    print_table("A training step against PyTorch (issue 23)", main())
