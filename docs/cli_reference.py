"""Writes docs/cli.md, the CLI reference, by walking the parser that `ipulab` itself runs
(ipulab.cli.build_parser): every command and action with its own --help, so the page cannot
drift from the program."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

HEADER = """# Command-line reference

Generated at build time from `ipulab.cli.build_parser()` (docs/cli_reference.py): each section is
the `--help` of one command, exactly as `ipulab` prints it.
"""


def _subcommands(parser: argparse.ArgumentParser):
    """(name, parser) of each subcommand of `parser`, in the order it lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def sections(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command words, help text) for `parser` and every subcommand below it, depth first."""
    yield path, parser.format_help()
    for name, sub in _subcommands(parser):
        yield from sections(sub, path + (name,))


def render() -> str:
    """The whole page as MyST markdown; help is formatted 100 columns wide, whatever the terminal."""
    from ipulab.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parts = [HEADER]
        for path, text in sections(build_parser()):
            level = "#" * min(2 + max(len(path) - 1, 0), 4)
            title = " ".join(("ipulab",) + path)
            parts.append(f"{level} `{title}`\n\n```text\n{text.rstrip()}\n```\n")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(parts)


def write(target: Path) -> None:
    """Write the page, touching the file only when its text changed (no needless rebuilds)."""
    text = render()
    if not target.exists() or target.read_text() != text:
        target.write_text(text)


if __name__ == "__main__":
    write(Path(__file__).resolve().parent / "cli.md")
