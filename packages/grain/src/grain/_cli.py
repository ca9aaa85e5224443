"""The `grain` command-line tool: argument parsing and exit codes.

Each command lives in its own module (`_cli_demo`, `_cli_convert`,
`_cli_inspect`, `_cli_bench`), which adds its arguments and runs it; this
module only builds the parser and turns the outcome into an exit status.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

import grain
import grain._cli_bench as _cli_bench
import grain._cli_convert as _cli_convert
import grain._cli_demo as _cli_demo
import grain._cli_inspect as _cli_inspect
from grain._cli_common import EXIT_FAILED, EXIT_INTERRUPTED, CommandError

_DESCRIPTION = """\
grain: try the library, turn data into ArrayRecord files, look inside them and
time pipelines. Run "grain COMMAND --help" for a command's options."""

_EPILOG = """\
exit codes (every command):
  0    success
  1    the command ran and failed: one of the demo's checks did not match, the
       records convert read back are not the records it wrote, or reading a
       record or running a pipeline raised
  2    bad usage: a bad option or value (argparse), a missing input path, an
       input whose format the command does not read, an output that already
       exists (convert without --overwrite)
  130  interrupted (Ctrl-C)
An error is reported as one line on stderr, "grain COMMAND: error: ...", after
the traceback when your own code (a bench pipeline file) raised.

examples:
  grain demo
  grain convert data.jsonl out/train --num-shards 4
  grain inspect 'out/train@4' --num-records 2
  grain bench --builtin mp-images --num-elements 200 --json"""

_COMMANDS = {
    "demo": _cli_demo,
    "convert": _cli_convert,
    "inspect": _cli_inspect,
    "bench": _cli_bench,
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `grain` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="grain",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"grain {grain.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=module.SUMMARY,
            description=module.DESCRIPTION,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        sub.set_defaults(run=module.run, check=module.check_arguments, subparser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `grain` command; returns its exit status."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's usage, not the top-level one (exit 2)
        args.subparser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.check(args, args.subparser)  # calls subparser.error (exit 2) on a bad value
    try:
        return args.run(args)
    except CommandError as error:
        sys.stdout.flush()
        print(f"grain {args.command}: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        sys.stdout.flush()
        print(f"grain {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # a bug, or an error nobody foresaw: show where it came from
        sys.stdout.flush()
        traceback.print_exc()
        print(f"grain {args.command}: error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
