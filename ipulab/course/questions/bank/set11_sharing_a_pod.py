"""Exercise set 11 · sharing a Pod: place partitions so that every request fits, explain the
controller's refusals, predict a backfill schedule, and find the scheduling that minimises the
mean wait on a day's trace.

Every check replays the answer on the simulated V-IPU controller (a fresh Pod in a temporary
state file) or on vipu.Scheduler: the outcomes are theirs."""
import contextlib
import dataclasses
import tempfile
from pathlib import Path

from .... import vipu
from ....errors import VipuError
from ..messages import Fail, NotAnswered
from ..kit import call, number
from ..registry import Par, exercise_set, question

exercise_set("ex11", "11_sharing_a_pod.ipynb", "Sharing a Pod",
             "Place partitions so that every request fits, explain the controller's refusals, "
             "predict a backfill schedule, and find the scheduling that minimises the mean wait "
             "on a day's trace.")

USER = "you"


@contextlib.contextmanager
def _pod(allocations: dict, existing=()):
    """A fresh Pod16 in a temporary state file with these allocations and partitions
    (user, name, size, allocation) already made; yields a controller acting for USER."""
    with tempfile.TemporaryDirectory(prefix="ipulab-ex11-") as d:
        db = Path(d) / "vipu.sqlite"
        vipu.connect(db, "admin").init("pod16", allocations=allocations)
        for user, name, size, alloc in existing:
            vipu.connect(db, user).create_partition(name, size, allocation=alloc)
        yield vipu.connect(db, USER)


# --- 1 ---------------------------------------------------------------------------------------
# (allocations, partitions already there, requests): each can be met, in a good order
PLACE_CASES = [
    ({"ours": (0, 2, None), "lab": (2, 2, None)}, [("zoe", "zoe-1", 4, "lab")],
     [("a", 2), ("b", 8), ("c", 2)]),
    ({"ours": (0, 2, None), "lab": (2, 2, None)},
     [("zoe", "zoe-1", 1, "ours"), ("zoe", "zoe-2", 4, "lab")],
     [("p", 2), ("q", 4), ("r", 4), ("s", 1)]),
    ({"big": (0, 2, None), "small": (2, 1, None), "rest": (3, 1, None)},
     [("zoe", "zoe-1", 2, "small")], [("t", 1), ("u", 4), ("v", 8), ("w", 1)]),
]


def _steps(plan, requests):
    """The learner's plan as (name, size, allocation or None) steps, checked against the
    requests: each request once, with its size."""
    if not isinstance(plan, (list, tuple)):
        raise Fail(f"plan(requests, free) should return a list of (name, size, allocation), "
                   f"got {type(plan).__name__}")
    steps = []
    for step in plan:
        if not isinstance(step, (list, tuple)) or len(step) not in (2, 3):
            raise Fail(f"each step is (name, size) or (name, size, allocation), not {step!r}")
        steps.append((step[0], step[1], step[2] if len(step) == 3 else None))
    asked = sorted((n, s) for n, s in requests)
    if sorted((n, s) for n, s, _ in steps) != asked:
        raise Fail(f"your plan creates {[(n, s) for n, s, _ in steps]}; the requests are "
                   f"{list(requests)}: create each one once, with its size")
    return steps


@question(
    "ex11.place", title="Place partitions so that every request fits", kind="system",
    statement="""
You (user `"you"`) must create several partitions on a Pod16 that other users already share.
Write `plan(requests, free)`: `requests` is a list of `(name, size)`; `free` maps each
allocation you may use, in the controller's order, to the list of its free IPUs. Return the
steps to run, in order: `(name, size, allocation)` (the allocation may be `None`: the controller
then takes the first one where the partition fits). Every request must be created; the
controller places each partition on the lowest free aligned block. The check replays your plan
on three Pods with `ctl.create_partition(name, size, allocation=...)`.
""",
    hints=[
        "Try the requests in the order given on the Pod of the notebook: which one is refused, "
        "and why was there no room left for it?",
        "A small partition placed first can take a piece of the only block where a big one "
        "would fit. Aligned power-of-two blocks pack perfectly when the big ones go first.",
        "return [(name, size, None) for name, size in sorted(requests, key=lambda r: -r[1])]",
    ])
def _place(plan):
    for allocations, existing, requests in PLACE_CASES:
        with _pod(allocations, existing) as ctl:
            free = {a.name: list(a.free) for a in ctl.list_allocations()}
            steps = _steps(call(plan, list(requests), free, what="plan(requests, free)"),
                           requests)
            for name, size, alloc in steps:
                try:
                    ctl.create_partition(name, size, allocation=alloc)
                except VipuError as e:
                    done = [p.name for p in ctl.list_partitions()]
                    raise Fail(f"on the Pod with free IPUs {free} and requests {requests}, "
                               f"after creating {done or 'nothing'}, {name} ({size} IPUs"
                               f"{', in ' + alloc if alloc else ''}) was refused: "
                               f"{type(e).__name__}: {e}") from None
    return f"all the requests fit on the {len(PLACE_CASES)} Pods"


# --- 2 ---------------------------------------------------------------------------------------
REFUSAL_POD = ({"ours": (0, 2, None), "theirs": (2, 2, "zoe")},
               [("zoe", "zoe-big", 4, "theirs"), (USER, "you-a", 2, "ours"),
                (USER, "you-b", 1, "ours")])
REFUSAL_REQUESTS = {
    "six": ("create_partition", ("x", 6), {}),
    "eight": ("create_partition", ("y", 8), {}),
    "four": ("create_partition", ("z", 4), {}),
    "theirs": ("create_partition", ("w", 2), {"allocation": "theirs"}),
    "again": ("create_partition", ("you-a", 1), {}),
    "remove": ("remove_partition", ("zoe-big",), {}),
    "whole pod": ("create_partition", ("v", 16), {}),
}
OUTCOMES = ("created", "PartitionSizeError", "PartitionNameError", "AllocationError",
            "NoFreeIpusError", "PartitionOwnerError", "UnknownPartitionError", "SyncTypeError")
MISREAD = {   # (your outcome, the controller's): what the confusion is
    ("PartitionSizeError", "AllocationError"):
        "16 is a power of two and no larger than the Pod; what stops it is that a partition "
        "cannot span allocations, and no allocation of yours has 16 IPUs.",
    ("created", "NoFreeIpusError"):
        "counting free IPUs is not enough: the partition needs an aligned block of them.",
    ("AllocationError", "NoFreeIpusError"):
        "the allocation 'ours' is big enough (8 IPUs); it is its free IPUs that do not form a "
        "block of 8.",
    ("PartitionOwnerError", "UnknownPartitionError"):
        "a partition that is not yours and not shared with you is invisible to you: the "
        "controller says it does not know it rather than whose it is (a refusal must not "
        "reveal what you cannot see).",
    ("NoFreeIpusError", "created"):
        "IPUs 4 to 7 are free: an aligned block of 4.",
}


def _outcome(ctl, method, args, kwargs) -> tuple[str, str]:
    try:
        getattr(ctl, method)(*args, **kwargs)
    except VipuError as e:
        return type(e).__name__, str(e)
    return "created", "it was created"


@question(
    "ex11.refusal", title="Predict: which rule refuses each request", kind="predict",
    statement="""
A Pod16 has two allocations: `"ours"` (machines 0–1, IPUs 0–7, for everyone) and `"theirs"`
(machines 2–3, IPUs 8–15, for Zoe only). Zoe has `"zoe-big"` (4 IPUs of theirs); you have
`"you-a"` (2 IPUs) and `"you-b"` (1 IPU), both in ours. As user `"you"`, each request alone on
this Pod: `"six"`: create `x` of 6 IPUs; `"eight"`: create `y` of 8; `"four"`: create `z` of 4;
`"theirs"`: create `w` of 2 with `allocation="theirs"`; `"again"`: create `you-a` of 1;
`"remove"`: remove `zoe-big`; `"whole pod"`: create `v` of 16. Give `outcomes`, a dict from each
label to `"created"` or the name of the error class the controller raises (from
`ipulab.errors`).
""",
    hints=[
        "The rules, in the order the controller checks them: a valid name, a power-of-two "
        "size, a unique name, an allocation granted to you that is big enough, then a free "
        "aligned block in it. Removing: only the creator may, and a partition you cannot see "
        "is one the controller does not know (for you).",
        "'ours' has IPUs 0-7; you-a and you-b take 0-1 and 2. Which aligned blocks of 4 and 8 "
        "are still free? And no allocation of yours has 16 IPUs.",
        "Build this Pod in your notebook (vipu.connect(db, user) for admin, zoe and you) and "
        "try each request: the message names the rule.",
    ])
def _refusal(outcomes):
    if outcomes is None or outcomes is Ellipsis:
        raise NotAnswered()
    if not isinstance(outcomes, dict) or set(outcomes) != set(REFUSAL_REQUESTS):
        got = sorted(outcomes) if isinstance(outcomes, dict) else type(outcomes).__name__
        raise Fail(f"outcomes should be a dict with the labels {sorted(REFUSAL_REQUESTS)}, "
                   f"got {got}")
    wrong = []
    for label, (method, args, kwargs) in REFUSAL_REQUESTS.items():
        with _pod(*REFUSAL_POD) as ctl:
            truth, message = _outcome(ctl, method, args, kwargs)
        said = str(outcomes[label])
        if said not in OUTCOMES:
            raise Fail(f"{label!r}: {said!r} is not an outcome; use one of {', '.join(OUTCOMES)}")
        if said != truth:
            why = MISREAD.get((said, truth), "")
            wrong.append(f"{label!r}: you said {said}, the controller says {truth}: "
                         f"{message}{'. ' + why if why else ''}")
    if wrong:
        raise Fail(f"{len(wrong)} of {len(REFUSAL_REQUESTS)} outcomes differ:\n    "
                   + "\n    ".join(wrong))
    return f"all {len(REFUSAL_REQUESTS)} outcomes are the controller's"


# --- 3 ---------------------------------------------------------------------------------------
MIN = 60.0
BACKFILL_TRACE = [dict(name="J1", user="ada", ipus=8, duration=60 * MIN),
                  dict(name="J2", user="bob", ipus=4, duration=120 * MIN),
                  dict(name="J3", user="cy", ipus=16, duration=30 * MIN, arrival=10 * MIN),
                  dict(name="J4", user="dee", ipus=2, duration=30 * MIN, arrival=20 * MIN),
                  dict(name="J5", user="ada", ipus=4, duration=90 * MIN, arrival=30 * MIN),
                  dict(name="J6", user="bob", ipus=8, duration=45 * MIN, arrival=40 * MIN)]


def _starts(policy: str) -> dict:
    s = vipu.Scheduler(16, policy).run(BACKFILL_TRACE)
    return {r.job.name: r.start / MIN for r in s.runs}


def _why_not(name: str, said: float) -> str:
    """Why the backfill schedule does not start job `name` at minute `said`: the jobs already
    running then hold too many IPUs, or it would run into J3's reservation; or, later than
    the scheduler, what lets it start sooner."""
    runs = {r.job.name: r for r in vipu.Scheduler(16, "backfill").run(BACKFILL_TRACE).runs}
    job, head = runs[name], runs["J3"]
    start, end = job.start / MIN, job.end / MIN
    if said > start:
        busy = sum(r.job.ipus for r in runs.values() if r is not job and
                   r.start < job.start < r.end)
        backfilled = job.job.arrival > head.job.arrival and job.start < head.start
        return (f"it can start earlier: at {start:g}, {16 - busy} IPUs are free for its "
                f"{job.job.ipus}" + (f", and it ends ({end:g}) before J3's reservation "
                                     f"({head.start / MIN:g})" if backfilled else ""))
    if said < job.job.arrival / MIN:
        return f"it cannot start at {said:g}: it arrives at {job.job.arrival / MIN:g}"
    holding = [r for r in runs.values() if r is not job and r.start / MIN < said < r.end / MIN]
    busy = sum(r.job.ipus for r in holding)
    if 16 - busy < job.job.ipus:
        who = " and ".join([", ".join(r.job.name for r in holding[:-1]), holding[-1].job.name]
                           if len(holding) > 1 else [holding[0].job.name])
        until = f" (until {holding[0].end / MIN:g})" if len(holding) == 1 else ""
        return (f"it cannot start at {said:g}: {who} hold{'s' if len(holding) == 1 else ''} "
                f"{busy} of the 16 IPUs{until}, and it needs {job.job.ipus}")
    return (f"it cannot start at {said:g}: it would still run at {head.start / MIN:g}, when "
            "J3's reservation begins, on IPUs J3 needs (all of them)")


@question(
    "ex11.schedule", title="Predict: a backfill schedule", kind="predict",
    statement="""
On a Pod16 under the **backfill** policy (EASY backfill, as `vipu.Scheduler(16, "backfill")`),
these jobs arrive (IPUs, minutes; arrival in minutes): J1 8 IPUs for 60 at 0; J2 4 for 120 at
0; J3 16 for 30 at 10; J4 2 for 30 at 20; J5 4 for 90 at 30; J6 8 for 45 at 40. Give `starts`:
a dict from each job to the minute it starts. Work it out by hand (then check it with the
scheduler, if you like).
""",
    hints=[
        "J1 and J2 start at once. J3 needs the whole Pod: it is the blocked head, and gets a "
        "reservation at the time when enough IPUs will be free if nothing else starts.",
        "J3's reservation is when J2 ends (120): until then, a later job may start only if it "
        "fits now and ends by 120 (or stays out of J3's block, which is every IPU).",
        "J4 fits at once (IPUs 12-13) and ends by 120; J6 fits when J1 ends and ends by 120; J5 "
        "would end after 120 wherever it starts before J3, so it waits for J3.",
    ])
def _schedule(starts):
    if starts is None or starts is Ellipsis:
        raise NotAnswered()
    names = [j["name"] for j in BACKFILL_TRACE]
    if not isinstance(starts, dict) or sorted(starts) != names:
        raise Fail(f"starts should be a dict with the jobs {names}, got "
                   f"{sorted(starts) if isinstance(starts, dict) else type(starts).__name__}")
    truth, fifo = _starts("backfill"), _starts("fifo")
    said = {n: number(starts[n], f"the start of {n}") for n in names}
    if said == truth:
        return "the scheduler agrees: " + ", ".join(f"{n} {truth[n]:g}" for n in names)
    if said == fifo:
        raise Fail("that is the FIFO schedule: nobody passes the blocked J3. Backfill lets a "
                   "later job start early when it cannot delay J3's reservation.")
    n = next(n for n in names if said[n] != truth[n])
    raise Fail(f"{n}: you said {said[n]:g}, the scheduler says otherwise: {_why_not(n, said[n])}.")


# --- 4 ---------------------------------------------------------------------------------------
DAY = vipu.generate_jobs(14, seed=111, horizon=4 * 3600)
WAIT_PAR = Par(seconds=5327.5, tolerance=1.1)


def _policy(config):
    """(policy, priorities) from the answer dict, checked."""
    if config is None or config is Ellipsis:
        raise NotAnswered()
    if not isinstance(config, dict) or "policy" not in config or \
            set(config) - {"policy", "priorities"}:
        raise Fail(f"config should be a dict {{'policy': ..., 'priorities': {{job: int}}}} "
                   f"(priorities optional), got {config!r}")
    if config["policy"] not in vipu.POLICIES:
        raise Fail(f"policy {config['policy']!r} is not one of {', '.join(vipu.POLICIES)}")
    prio = config.get("priorities") or {}
    names = {j.name for j in DAY}
    if not isinstance(prio, dict) or set(prio) - names or \
            not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 100
                    for v in prio.values()):
        raise Fail("priorities map job names (job0 … job13) to whole numbers from 0 to 100")
    return config["policy"], prio


@question(
    "ex11.min_wait", title="Performance: the shortest mean wait on a busy afternoon",
    kind="performance",
    statement=f"""
`DAY = vipu.generate_jobs(14, seed=111, horizon=4 * 3600)`: 14 jobs of four users arrive on a
Pod16 within four hours. You run the scheduler: give `config`, a dict with the `"policy"`
(`"fifo"`, `"backfill"` or `"fair"`) and, if you like, `"priorities"`: a dict from job names to
whole numbers 0–100 (a higher priority goes first in the queue under FIFO and backfill; under
fair-share it only breaks ties between users of equal usage). The check schedules the day and
grades the **mean wait** (arrival to start, over all jobs). **Par**: {WAIT_PAR.seconds / 60:.1f}
minutes, within {WAIT_PAR.tolerance:g}×.
""",
    par=WAIT_PAR,
    hints=[
        "Schedule DAY under each policy in your notebook and compare mean_wait() and "
        "waits_by_user(): who waits, and behind which job?",
        "A 16-IPU job at the head of a FIFO queue holds up every small job behind it. Backfill "
        "lets small ones pass when they cannot delay it; putting small or short jobs first "
        "(priorities, or fair-share between users) shortens many waits at the cost of a few.",
        "{'policy': 'fair'}, or backfill with a higher priority for jobs of fewer IPUs.",
    ])
def _min_wait(config):
    policy, prio = _policy(config)
    jobs = [dataclasses.replace(j, priority=prio.get(j.name, 0)) for j in DAY]
    s = vipu.Scheduler(16, policy).run(jobs)
    wait, par = s.mean_wait(), WAIT_PAR.seconds
    ratio = wait / par
    if wait > WAIT_PAR.tolerance * par:
        worst = max(s.runs, key=lambda r: r.wait)
        users = ", ".join(f"{u} {w / 60:.0f}" for u, w in s.waits_by_user().items())
        raise Fail(f"too slow: a mean wait of {wait / 60:.1f} min is {ratio:.2f}× par "
                   f"({par / 60:.1f} min). Mean wait per user (min): {users}; the longest wait "
                   f"is {worst.job.name}'s ({worst.job.ipus} IPUs), {worst.wait / 60:.0f} min.")
    return (f"correct; a mean wait of {wait / 60:.1f} min, {ratio:.2f}× par ({par / 60:.1f} "
            f"min), utilisation {100 * s.utilisation():.1f} %", {"seconds": round(wait, 1)})
