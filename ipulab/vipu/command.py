"""`ipulab vipu`: the V-IPU command line over the shared state (as Graphcore's `vipu`).

    ipulab vipu [--db PATH] [--user NAME] init --system pod16 [--allocation NAME=MACHINES[:USER]]...
    ipulab vipu [--db PATH] [--user NAME] create partition NAME --size N [--allocation A]
                                          [--reconfigurable] [--sync-type T] [--gcds G]
    ipulab vipu [--db PATH] [--user NAME] remove partition NAME
    ipulab vipu [--db PATH] [--user NAME] list partitions|allocations [--json]
    ipulab vipu [--db PATH] [--user NAME] show partition NAME [--json]

Every refusal is one line on stderr naming the rule, and exit code 1; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..errors import IpuLabError
from .controller import SYNC_TYPES, Controller, spans

MACHINES_HELP = ("NAME=MACHINES[:USER]: the Pod's machines (Bow-2000s of 4 IPUs, numbered from "
                 "0) granted to USER (default: everyone); MACHINES is one machine (2) or a "
                 "range FIRST-LAST (0-1 = IPUs 0-7). Repeat for several allocations; none: the "
                 "whole Pod to everyone, as allocation 'all'")


class OneLineParser(argparse.ArgumentParser):
    """A usage error as one line on stderr (exit code 2), like every refusal of the command."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def add_parser(subparsers) -> None:
    """Add `vipu` and its actions to the `ipulab` command's subparsers."""
    v = subparsers.add_parser(
        "vipu", help="share a simulated Pod: V-IPU allocations and partitions",
        description="A V-IPU controller over a simulated Pod of Bow-2000s, its state in one "
        "SQLite file that every process shares. Partitions are power-of-two blocks of IPUs "
        "of one allocation, joined by IPU-Links, isolated from each other, visible to their "
        "creator only unless shared.")
    v.add_argument("--db", default=None, metavar="PATH",
                   help="the state file (default: $IPULAB_VIPU_DB, else ~/.ipulab/vipu.sqlite)")
    v.add_argument("--user", default=None, metavar="NAME",
                   help="act as this user (default: $IPULAB_USER, else the login name)")
    sub = v.add_subparsers(dest="vipu_action", metavar="ACTION", parser_class=OneLineParser)
    init = sub.add_parser("init", help="set up the cluster: a Pod and its allocations")
    init.add_argument("--system", default="pod16",
                      help="pod16, pod64, pod128, pod256 (Bow) or m2000-podN; default pod16")
    init.add_argument("--allocation", action="append", default=[], metavar="NAME=MACHINES[:USER]",
                      help=MACHINES_HELP)
    create = _object(sub, "create", "create a partition")
    create.add_argument("--size", required=True, metavar="N", help="IPUs: a power of two")
    create.add_argument("--allocation", default=None, metavar="A", help="take the IPUs from this allocation "
                        "(default: the first of yours with room)")
    create.add_argument("--reconfigurable", action="store_true",
                        help="a reconfigurable partition (needs sync type c2-compatible)")
    create.add_argument("--sync-type", default=None, metavar="|".join(SYNC_TYPES),
                        help="default pod-native-default; c2-compatible if --reconfigurable")
    create.add_argument("--gcds", default="1", metavar="G", help="graph compilation domains (default 1)")
    _object(sub, "remove", "remove one of your partitions")
    show = _object(sub, "show", "show a partition")
    show.add_argument("--json", action="store_true",
                      help="print JSON, with the partition's IPUoF configuration")
    lst = sub.add_parser("list", help="list partitions or allocations")
    lst.add_argument("what", choices=("partitions", "allocations"))
    lst.add_argument("--json", action="store_true", help="print JSON")


def _object(sub, action: str, text: str):
    """`ACTION partition NAME`: the parser of the partition."""
    p = sub.add_parser(action, help=text)
    objects = p.add_subparsers(dest="object", metavar="OBJECT", required=True)
    part = objects.add_parser("partition", help=text)
    part.add_argument("name", metavar="NAME")
    return part


def _int(text: str):
    """An int if the text is one (else the text, for the controller to refuse by name)."""
    try:
        return int(text)
    except ValueError:
        return text


def run(args) -> int:
    """Run `ipulab vipu ACTION`; returns the exit code."""
    if args.vipu_action is None:
        print("ipulab vipu: give an action: init, create, remove, list, show "
              "(ipulab vipu --help)", file=sys.stderr)
        return 2
    try:
        ctl = Controller(args.db, args.user)
        print(ACTIONS[args.vipu_action](ctl, args))
    except IpuLabError as e:
        print(f"ipulab vipu: {e}".replace("\n", " "), file=sys.stderr)
        return 1
    return 0


def _init(ctl: Controller, args) -> str:
    allocs = ctl.init(args.system, args.allocation)
    pod = ctl.system
    lines = [f"{pod.description}: {pod.num_ipus} IPUs in {pod.num_machines} machines, state "
             f"in {ctl.store.path}"]
    lines += [f"allocation {a.name}: machines {a.first_machine}-{a.first_machine + a.machines - 1}"
              f" (IPUs {a.first_ipu}-{a.end_ipu - 1}) for {a.user or 'everyone'}" for a in allocs]
    return "\n".join(lines)


def _create(ctl: Controller, args) -> str:
    p = ctl.create_partition(args.name, _int(args.size), args.allocation, args.reconfigurable,
                             args.sync_type, _int(args.gcds))
    return (f"created partition {p.name}: {p.size} IPU(s), IPUs {spans(p.ipus)} of allocation "
            f"{p.allocation}, sync {p.sync_type}, {p.gcds} GCD(s)")


def _remove(ctl: Controller, args) -> str:
    p = ctl.remove_partition(args.name)
    return f"removed partition {p.name}: IPUs {spans(p.ipus)} are free (their memory cleared)"


def _list(ctl: Controller, args) -> str:
    if args.what == "allocations":
        rows = [a.to_dict() for a in ctl.list_allocations()]
        if args.json:
            return json.dumps(rows)
        return _table(["allocation", "user", "machines", "IPUs", "free IPUs"],
                      [[r["name"], r["user"], spans(r["machines"]), spans(r["ipus"]),
                        spans(r["free"])] for r in rows])
    parts = ctl.list_partitions()
    if args.json:
        return json.dumps([p.summary() for p in parts])
    return _table(["partition", "size", "IPUs", "user", "allocation", "sync type", "GCDs"],
                  [[p.name, str(p.size), spans(p.ipus), p.user, p.allocation, p.sync_type,
                    str(p.gcds)] for p in parts])


def _show(ctl: Controller, args) -> str:
    p = ctl.partition(args.name)
    d = {**p.to_dict(), "ipuof": p.ipuof_config()}
    if args.json:
        return json.dumps(d)
    return "\n".join(f"{k:14} {spans(v) if k in ('ipus', 'machines') else v}"
                     for k, v in d.items() if k != "ipuof")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return f"no {headers[0]}s"
    widths = [max(len(c) for c in col) for col in zip(headers, *rows)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [headers, ["-" * w for w in widths]] + rows)


def add_train_options(train) -> None:
    """`ipulab train --partition NAME [--db PATH] [--user NAME]`: train on a partition."""
    train.add_argument("--partition", default=None, metavar="NAME",
                       help="train on this V-IPU partition's IPUs instead of --system (see "
                       "`ipulab vipu`); with --tiles-per-ipu for a small, fast run")
    train.add_argument("--db", default=None, metavar="PATH",
                       help="with --partition: the V-IPU state (default: $IPULAB_VIPU_DB, else "
                       "~/.ipulab/vipu.sqlite)")
    train.add_argument("--user", default=None, metavar="NAME",
                       help="with --partition: act as this user (default: $IPULAB_USER)")


def train_device(args, tiles_per_ipu: int | None):
    """The device of `ipulab train --partition`, or None without one."""
    if args.partition is None:
        return None
    return Controller(args.db, args.user).partition(args.partition).device(
        tiles_per_ipu=tiles_per_ipu)


ACTIONS = {"init": _init, "create": _create, "remove": _remove, "list": _list, "show": _show}
