"""The `ipulab` command's argument parsers: vipu's one-line usage errors (no abbreviations, a
did-you-mean, choices folded), and for a flag a subcommand does not know, that subcommand's
usage first; a long list of choices shown as a name in the usage."""
from __future__ import annotations

import sys

from ipulab.vipu.command import OneLineParser

MOST_CHOICES_SHOWN = 7          # more: the usage says SYSTEM, the help says where they are


class Parser(OneLineParser):
    """A parser of the `ipulab` command (subcommands' parsers are of its class)."""

    def parse_known_args(self, args=None, namespace=None):
        """Arguments left over are the usage error of the parser that met them, whichever."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.unrecognized(extras)
        return namespace, extras

    def unrecognized(self, extras: list[str]):
        self.print_usage(sys.stderr)
        super().unrecognized(extras)

    def add_argument(self, *args, **kwargs):
        choices = kwargs.get("choices")
        if choices is not None and len(choices) > MOST_CHOICES_SHOWN and "metavar" not in kwargs:
            kwargs["metavar"] = args[0].lstrip("-").replace("-", "_").upper()
        return super().add_argument(*args, **kwargs)
