"""`ipulab vipu`: the V-IPU command line over the shared state (as Graphcore's `vipu`).

    ipulab vipu [--db PATH] [--user NAME] init --system pod16 [--allocation NAME=MACHINES[:USER]]...
    ipulab vipu [--db PATH] [--user NAME] create partition NAME --size N [--allocation A]
                                          [--reconfigurable] [--sync-type T] [--gcds G]
    ipulab vipu [--db PATH] [--user NAME] remove partition NAME
    ipulab vipu [--db PATH] [--user NAME] list partitions|allocations [--json]
    ipulab vipu [--db PATH] [--user NAME] show partition NAME [--json]
    ipulab vipu serve --socket PATH [--db PATH]          # a class: the state behind a server
    ipulab vipu --server PATH [--server-user ACCOUNT] ACTION ...     # ... and its clients

--db, --user and --server may come before or after the action. Local mode (no server) is for
one person: the user name is a label, not an identity. With --server (or $IPULAB_VIPU_SERVER)
the user is the account the kernel names; --user and $IPULAB_USER are ignored (with a note).
A client talks only to a server of the account that owns the socket's folder, or of
--server-user ($IPULAB_VIPU_SERVER_USER), as the kernel says; anything else is refused unsent.
A refusal is one line on stderr naming the rule and exit code 1; a usage error exit code 2;
never a traceback.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys

from ..errors import IpuLabError
from .controller import SYNC_TYPES, Controller, ignored_user, spans

MACHINES_HELP = ("NAME=MACHINES[:USER]: the Pod's machines (Bow-2000s of 4 IPUs, numbered from "
                 "0) granted to USER (default: everyone); MACHINES is one machine (2) or a "
                 "range FIRST-LAST (0-1 = IPUs 0-7). Repeat for several allocations; none: the "
                 "whole Pod to everyone, as allocation 'all'")


class OneLineParser(argparse.ArgumentParser):
    """A usage error as one line on stderr (exit code 2), like every refusal of the command:
    no abbreviations (`--siz` is not `--size`), a did-you-mean for an unknown flag or an
    invalid choice, a long list of choices folded. The `ipulab` command's parsers are these."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, but arguments left over are this parser's usage error (one line),
        not the `ipulab` command's (its usage, then the error)."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not self._subparsers:
            self.unrecognized(extras)
        return namespace, extras

    def unrecognized(self, extras: list[str]):
        """The usage error of arguments this parser does not know, with the flag it may mean."""
        flags = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        wrong = next((e.split("=")[0] for e in extras if e.startswith("--")), None)
        self.error(f"unrecognized arguments: {' '.join(extras)}"
                   f"{did_you_mean(wrong, flags) if wrong else ''}")

    def _check_value(self, action, value):
        """An invalid choice in brief: the value, the choice it may mean, the choices folded."""
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            raise argparse.ArgumentError(action, f"invalid choice {value!r}"
                                         f"{did_you_mean(str(value), choices)}; choose from "
                                         f"{folded(choices)}")


def did_you_mean(wrong: str, known: list[str]) -> str:
    """'; did you mean X?' for the known word nearest to a wrong one (difflib), or ''."""
    near = difflib.get_close_matches(wrong, known, n=1, cutoff=0.6)
    return f"; did you mean {near[0]}?" if near else ""


def folded(choices: list[str], most: int = 6) -> str:
    """The choices, the first `most` of a longer list and how many more."""
    if len(choices) <= most + 1:
        return ", ".join(choices)
    return f"{', '.join(choices[:most])} and {len(choices) - most} more"


DB_HELP = "the state file (default: $IPULAB_VIPU_DB, else ~/.ipulab/vipu.sqlite)"
USER_HELP = ("local mode: act as this user, a label (default: $IPULAB_USER, else the login "
             "name); ignored with --server, where you are your account")
SERVER_HELP = ("ask the V-IPU server on this Unix socket (`ipulab vipu serve`) instead of "
               "opening a state file (default: $IPULAB_VIPU_SERVER)")
SERVER_USER_HELP = ("with --server: the account the server must run as (default: "
                    "$IPULAB_VIPU_SERVER_USER, else the owner of the socket's folder)")


def _common(parser, defaults: bool) -> None:
    """--db, --user and --server: before the action (with defaults) or after it (leaving the
    values given before alone)."""
    default = None if defaults else argparse.SUPPRESS
    parser.add_argument("--db", default=default, metavar="PATH", help=DB_HELP)
    parser.add_argument("--user", default=default, metavar="NAME", help=USER_HELP)
    parser.add_argument("--server", default=default, metavar="SOCKET", help=SERVER_HELP)
    parser.add_argument("--server-user", default=default, metavar="ACCOUNT",
                        help=SERVER_USER_HELP)


def _count(what: str, rule: str):
    """An argparse type: a whole number, else a usage error naming the rule."""
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {rule}, not {text!r}") from None
    return parse


def add_parser(subparsers) -> None:
    """Add `vipu` and its actions to the `ipulab` command's subparsers."""
    v = subparsers.add_parser(
        "vipu", help="share a simulated Pod: V-IPU allocations and partitions",
        description="A V-IPU controller over a simulated Pod of Bow-2000s. Partitions are "
        "power-of-two blocks of IPUs of one allocation, joined by IPU-Links, isolated from "
        "each other, visible to their creator only unless shared. Local mode, for one person: "
        "the state is one SQLite file and user names are labels, not authentication. For a "
        "class on one machine: the administrator runs `ipulab vipu serve --socket PATH`, and "
        "users run `ipulab vipu --server PATH ACTION ...`, each as who the kernel says they "
        "are.")
    _common(v, defaults=True)
    sub = v.add_subparsers(dest="vipu_action", metavar="ACTION", parser_class=OneLineParser)
    serve = sub.add_parser(
        "serve", help="run the controller as a server for every user of this machine",
        description="Run the V-IPU controller as a server: it alone opens the state file "
        "(made 0600, readable by the server's user only) and answers on a Unix socket that "
        "every local user may connect to (0666). A client is who the kernel says it is (its "
        "account name, or uid<N>); the server's own user is the administrator (init, every "
        "allocation and partition). Runs until SIGTERM or Ctrl-C; a stale socket left by a "
        "killed server is replaced, a live one refused.")
    serve.add_argument("--socket", required=True, metavar="PATH",
                       help="the Unix socket to listen on, e.g. /run/ipulab/vipu.sock (its "
                       "folder must be reachable by the users)")
    serve.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH", help=DB_HELP)
    for flag in ("--user", "--server", "--server-user"):    # refused by run(), in one line
        serve.add_argument(flag, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    init = sub.add_parser("init", help="set up the cluster: a Pod and its allocations")
    _common(init, defaults=False)
    init.add_argument("--system", default="pod16",
                      help="a Pod of `ipulab info`: pod16, pod32, pod64, pod128, pod256 "
                      "(Bow-2000s) or m2000-pod16 ... m2000-pod256; default pod16")
    init.add_argument("--allocation", action="append", default=[], metavar="NAME=MACHINES[:USER]",
                      help=MACHINES_HELP)
    create = _object(sub, "create", "create a partition")
    create.add_argument("--size", required=True, metavar="N", help="IPUs: a power of two",
                        type=_count("the size of a partition", "a power of two (1, 2, 4, "
                                    "8, ...)"))
    create.add_argument("--allocation", default=None, metavar="A", help="take the IPUs from this allocation "
                        "(default: the first of yours with room)")
    create.add_argument("--reconfigurable", action="store_true",
                        help="a reconfigurable partition (needs sync type c2-compatible)")
    create.add_argument("--sync-type", default=None, metavar="|".join(SYNC_TYPES),
                        help="default pod-native-default; c2-compatible if --reconfigurable")
    create.add_argument("--gcds", default=1, metavar="G", type=_count("--gcds", "a power of two"),
                        help="graph compilation domains (default 1)")
    _object(sub, "remove", "remove one of your partitions")
    show = _object(sub, "show", "show a partition")
    show.add_argument("--json", action="store_true",
                      help="print JSON, with the partition's IPUoF configuration")
    lst = sub.add_parser("list", help="list partitions or allocations")
    lst.add_argument("what", choices=("partitions", "allocations"))
    lst.add_argument("--json", action="store_true", help="print JSON")
    _common(lst, defaults=False)


def _object(sub, action: str, text: str):
    """`ACTION partition NAME`: the parser of the partition."""
    p = sub.add_parser(action, help=text)
    objects = p.add_subparsers(dest="object", metavar="OBJECT", required=True)
    part = objects.add_parser("partition", help=text)
    part.add_argument("name", metavar="NAME")
    _common(part, defaults=False)
    return part


def _usage(text: str) -> int:
    print(f"ipulab vipu: {text} (ipulab vipu --help)", file=sys.stderr)
    return 2


def run(args) -> int:
    """Run `ipulab vipu ACTION`; returns the exit code."""
    if args.vipu_action is None:
        return _usage("give an action: serve, init, create, remove, list, show")
    if args.vipu_action == "serve":
        if any(v is not None for v in (args.user, args.server, args.server_user)):
            return _usage("serve takes --socket and --db: the server acts as the user who "
                          "runs it, and clients are who the kernel says they are")
        return _serve(args)
    if args.server is not None and args.db is not None:
        return _usage("--db is the state file of local mode, --server a server that alone "
                      "opens its state file: give one of them")
    note = ""
    try:
        ctl, note = controller(args)
        text = ACTIONS[args.vipu_action](ctl, args)
    except IpuLabError as e:                # one line, with the note if there is one
        print(f"ipulab vipu: {e}{f' ({note})' if note else ''}".replace("\n", " "),
              file=sys.stderr)
        return 1
    print(text)
    if note:
        print(f"ipulab vipu: note: {note}", file=sys.stderr)
    return 0


def controller(args):
    """(the controller the flags name, a note): a server's (--server, else
    $IPULAB_VIPU_SERVER unless --db is given), with a note if --user or $IPULAB_USER claims
    another name, which is ignored; else local mode's, with no note."""
    server = args.server or (None if args.db is not None else
                             os.environ.get("IPULAB_VIPU_SERVER") or None)
    if server is None:
        return Controller(args.db, args.user), ""
    from .client import RemoteController
    ctl = RemoteController(server, server_user=getattr(args, "server_user", None))
    claimed = args.user if args.user is not None else os.environ.get("IPULAB_USER")
    if claimed and claimed != ctl.user:
        return ctl, ignored_user(claimed, ctl)
    return ctl, ""


def _serve(args) -> int:
    from .server import serve
    try:
        return serve(args.socket, getattr(args, "db", None))
    except IpuLabError as e:
        print(f"ipulab vipu serve: {e}".replace("\n", " "), file=sys.stderr)
        return 1


def _init(ctl: Controller, args) -> str:
    allocs = ctl.init(args.system, args.allocation)
    pod = ctl.system
    lines = [f"{pod.description}: {pod.num_ipus} IPUs in {pod.num_machines} machines, state "
             f"in {ctl.where}"]
    lines += [f"allocation {a.name}: machines {a.first_machine}-{a.first_machine + a.machines - 1}"
              f" (IPUs {a.first_ipu}-{a.end_ipu - 1}) for {a.user or 'everyone'}" for a in allocs]
    return "\n".join(lines)


def _create(ctl: Controller, args) -> str:
    p = ctl.create_partition(args.name, args.size, args.allocation, args.reconfigurable,
                             args.sync_type, args.gcds)
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
    """`ipulab train --partition NAME [--db PATH] [--user NAME] [--server SOCKET]`: train on a
    partition (local mode, or a V-IPU server's)."""
    train.add_argument("--partition", default=None, metavar="NAME",
                       help="train on this V-IPU partition's IPUs instead of --system (see "
                       "`ipulab vipu`); with --tiles-per-ipu for a small, fast run")
    train.add_argument("--db", default=None, metavar="PATH",
                       help="with --partition: the V-IPU state (default: $IPULAB_VIPU_DB, else "
                       "~/.ipulab/vipu.sqlite)")
    train.add_argument("--user", default=None, metavar="NAME",
                       help="with --partition: act as this user (default: $IPULAB_USER); "
                       "ignored with a server")
    train.add_argument("--server", default=None, metavar="SOCKET",
                       help="with --partition: the V-IPU server that holds it (default: "
                       "$IPULAB_VIPU_SERVER)")
    train.add_argument("--server-user", default=None, metavar="ACCOUNT", help=SERVER_USER_HELP)


def train_device(args, tiles_per_ipu: int | None):
    """The device of `ipulab train --partition`, or None without one."""
    if args.partition is None:
        return None
    if args.server is not None and args.db is not None:
        from ..errors import VipuError
        raise VipuError("--db (local mode) or --server (a V-IPU server), not both")
    ctl, note = controller(args)
    if note:
        print(f"ipulab train: note: {note}", file=sys.stderr)
    return ctl.partition(args.partition).device(tiles_per_ipu=tiles_per_ipu)


ACTIONS = {"init": _init, "create": _create, "remove": _remove, "list": _list, "show": _show}
