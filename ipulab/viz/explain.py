"""Why one training step is faster or slower than another, from their profiles.

    b = step_breakdown(profile, images=64)   # cycles by part, bytes, IPUs per replica, idle...
    breakdown_rows(b)                        # [(label, value)] as `ipulab train` prints them
    explain(b_before, b_after, "4×16 fp32", "2×32 fp16")
    # '2×32 fp16 is 5.5× slower per image than 4×16 fp32, mostly in IPU-Link exchange
    #  (5 → 168 cycles per image): each replica now spans 2 IPUs, so ...'

A step's cycles are BSP sums: for each superstep, its slowest tile's phase. step_breakdown
splits them into the parts a learner can act on (compute, on-chip exchange, IPU-Link exchange,
sync, host), and measures what explains them: bytes over IPU-Links and between tiles, how many
IPUs a replica spans (so that its own tensors cross links), how long IPUs idle in compute
phases (a pipeline's bubble), how much compute work each image costs (recompute adds the
forward pass again) and how much of it runs in half-precision codelets. explain() names the part that changed most per image and the measured
cause, so the sentence follows the numbers, whatever option produced them.
"""
from __future__ import annotations

import numpy as np

from .base import fmt_bytes

# Profile phase -> what the step table calls it.
PARTS = {"compute": "compute", "exchange": "on-chip exchange",
         "inter_ipu_exchange": "IPU-Link exchange", "sync": "sync", "host_exchange": "host"}
SAME = 0.03          # within 3 % per image, two configurations are "about as fast"


def _compute_use(profile) -> tuple[int, float]:
    """(summed compute work of all tiles, share of the compute phases that a working IPU
    spends idle, waiting for the slowest IPU: a pipeline's bubble, unequal stages)."""
    busy = np.zeros(profile.num_ipus, np.int64)
    span = 0
    for rec in profile.steps:
        for kind, cyc in rec.phases:
            if kind == "compute":
                per_ipu = np.asarray(cyc).reshape(profile.num_ipus, -1).max(axis=1)
                busy += per_ipu
                span += int(per_ipu.max())
    used = busy[busy > 0]
    idle = 1.0 - float(used.mean()) / span if span and used.size else 0.0
    return int(np.sum(profile.compute_cycles_excluding_idle)), idle


def step_breakdown(profile, images: int) -> dict:
    """The figures of one step's profile that explain its speed: "cycles" and one entry per
    PARTS key (BSP cycles), "images" (per step), "link_bytes" and "exchange_bytes" (over
    IPU-Links, between tiles of one IPU), "replicas", "ipus_per_replica", "idle" (share of
    compute time an IPU waits), "work" (compute cycles of all tiles, without idle workers),
    "half" (share of the codelets' cycles in half-precision codelets), "supersteps" and
    "recompute_steps" (steps named for recomputation)."""
    phases = profile.phase_totals()
    src, dst, nbytes = profile.exchange_traffic()
    across = (src // profile.tiles_per_ipu) != (dst // profile.tiles_per_ipu)
    work, idle = _compute_use(profile)
    codelets = profile.codelet_cycles()
    half = sum(c["cycles"] for name, c in codelets.items() if "half" in name.lower())
    replicas = max(int(profile.replication_factor), 1)
    return {"cycles": int(profile.total_cycles), **{p: int(phases[p]) for p in PARTS},
            "images": int(images), "link_bytes": int(nbytes[across].sum()),
            "exchange_bytes": int(nbytes[~across].sum()), "replicas": replicas,
            "ipus_per_replica": max(profile.num_ipus // replicas, 1), "idle": idle,
            "work": work, "half": half / max(sum(c["cycles"] for c in codelets.values()), 1),
            "supersteps": len(profile.steps),
            "recompute_steps": sum("recompute" in rec.name for rec in profile.steps)}


def breakdown_rows(b: dict) -> list[tuple[str, str]]:
    """(label, value) rows: the cycles of each part with its share, and the link bytes."""
    total = max(b["cycles"], 1)
    rows = [(f"  {name}", f"{b[p]:,} cycles ({b[p] / total:.0%})") for p, name in PARTS.items()]
    return [("cycles by part", f"{b['cycles']:,} cycles"), *rows,
            ("IPU-Link bytes per step", fmt_bytes(b["link_bytes"], 1))]


def _per_image(b: dict, key: str) -> float:
    return b[key] / max(b["images"], 1)


def _link_cause(b0: dict, b1: dict) -> str:
    moved = f"{fmt_bytes(b0['link_bytes'], 1)} → {fmt_bytes(b1['link_bytes'], 1)} per step"
    n0, n1 = b0["ipus_per_replica"], b1["ipus_per_replica"]
    more = b1["link_bytes"] / max(b1["images"], 1) > b0["link_bytes"] / max(b0["images"], 1)
    if n1 > n0 and more:
        return (f"each replica now spans {n1} IPUs, so its own activations and gradients cross "
                f"the IPU-Links inside every step ({moved})")
    if n1 < n0 and not more:
        return (f"each replica now fits on {n1} IPU{'s' if n1 > 1 else ''}, so only "
                f"{'the all-reduce' if n1 == 1 else 'less'} crosses the IPU-Links ({moved})")
    half = _half(b0, b1)
    if b1["replicas"] != b0["replicas"]:
        return (f"the gradient all-reduce now adds {b1['replicas']} replicas' gradients instead "
                f"of {b0['replicas']}'s ({moved}){half}")
    return f"{'more' if more else 'fewer'} bytes cross the IPU-Links ({moved}){half}"


def _half(b0: dict, b1: dict) -> str:
    """A clause when half precision explains a change: values of 2 bytes instead of 4."""
    if b1["half"] - b0["half"] > 0.25:
        return (f"; {b1['half']:.0%} of the codelet cycles are now in half precision, whose "
                f"values are 2 bytes instead of 4 and whose products run at twice the rate")
    if b0["half"] - b1["half"] > 0.25:
        return "; back in single precision, every value is 4 bytes again instead of 2"
    return ""


def _compute_cause(b0: dict, b1: dict) -> str:
    idle0, idle1 = b0["idle"], b1["idle"]
    work = _per_image(b1, "work") / max(_per_image(b0, "work"), 1e-9)
    if abs(idle1 - idle0) >= 0.1:
        return (f"IPUs now wait {idle1:.0%} of the compute time instead of {idle0:.0%} (the "
                f"pipeline bubble and unequal stages leave IPUs idle while others work)"
                if idle1 > idle0 else
                f"IPUs now wait only {idle1:.0%} of the compute time instead of {idle0:.0%}")
    if work > 1.1 and b1["recompute_steps"] > b0["recompute_steps"]:
        return (f"each image costs {work - 1:.0%} more compute work: the forward pass runs "
                f"again before the backward pass ({b1['recompute_steps']} recompute steps)")
    if abs(work - 1) > 0.1:
        return (f"each image costs {abs(work - 1):.0%} {'more' if work > 1 else 'less'} "
                f"compute work{_half(b0, b1)}")
    more = "more" if b1["replicas"] > b0["replicas"] else "fewer"
    return (f"the same work per image runs on {more} replicas at once ({b0['replicas']} → "
            f"{b1['replicas']})")


def _exchange_cause(b0: dict, b1: dict) -> str:
    ratio = _per_image(b1, "exchange_bytes") / max(_per_image(b0, "exchange_bytes"), 1e-9)
    return f"each image moves {ratio:.0%} of the bytes between tiles it moved before{_half(b0, b1)}"


def _cause(part: str, b0: dict, b1: dict) -> str:
    if part == "inter_ipu_exchange":
        return _link_cause(b0, b1)
    if part == "compute":
        return _compute_cause(b0, b1)
    if part == "exchange":
        return _exchange_cause(b0, b1)
    if part == "sync":
        return (f"the step has {b1['supersteps']:,} supersteps instead of "
                f"{b0['supersteps']:,}, each behind a sync")
    return f"the host streams {b1['images']} images per step instead of {b0['images']}"


def explain(before: dict, after: dict, before_label: str, after_label: str) -> str:
    """One plain sentence: why the step of `after` is faster or slower per image than that of
    `before` (step_breakdown dicts), naming the part that changed most and its measured cause."""
    c0, c1 = _per_image(before, "cycles"), _per_image(after, "cycles")
    if abs(c1 / c0 - 1) < SAME:
        return (f"{after_label} is about as fast per image as {before_label} "
                f"({c0:,.0f} and {c1:,.0f} cycles per image).")
    slower = c1 > c0
    deltas = {p: _per_image(after, p) - _per_image(before, p) for p in PARTS}
    part = max(deltas, key=deltas.get) if slower else min(deltas, key=deltas.get)
    speed = f"{c1 / c0:.1f}× slower" if slower else f"{c0 / c1:.1f}× faster"
    return (f"{after_label} is {speed} per image than {before_label}, mostly in "
            f"{PARTS[part]} ({_per_image(before, part):,.0f} → {_per_image(after, part):,.0f} "
            f"cycles per image): {_cause(part, before, after)}.")
