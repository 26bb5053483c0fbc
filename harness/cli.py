"""The `harness` command. Thin: each feature module registers its own subcommands.

Exit codes: 0 ok, 1 checks failed (or the engine failed), 2 bad input / refused.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness import __version__
from harness.errors import HarnessError
from harness.shown import shown, shown_lines

# Each module has register(subparsers); a subcommand's handler takes the parsed args and returns an exit code.
COMMAND_MODULES = (
    "harness.commands",
    "harness.blocks.cli",
    "harness.conformance.cli",
    "harness.golden.cli",
    "harness.upgrade.cli",
    "harness.load.cli",
    "harness.matrix.cli",
    "harness.clients.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HarnessError as exc:
        # An error's text may quote a server, a cell or a log: its control characters are shown escaped.
        print(f"harness: error: {shown(exc.one_line())}", file=sys.stderr)
        tail = getattr(exc, "log_tail", "")
        if tail:
            print("--- engine log (tail) ---", file=sys.stderr)
            print(shown_lines(tail.rstrip()), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `harness conform --list | head`: the reader has gone; say nothing more (stdout is closed) and exit as a
        # pipe's writer does. stdout is pointed at /dev/null so the interpreter's final flush cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
