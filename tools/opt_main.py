"""The driver behind ``distir-opt`` (``tools/opt.py``): xDSL's opt driver with distir's
dialects, passes, front end, verifier and pass manager. Imported only once ``distir-opt``
has work to do (``--version`` answers without it)."""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import textwrap
from collections.abc import Sequence

from xdsl.xdsl_opt_main import xDSLOptMain

from distir.dialects.frontend import decode_source
from distir.frontends.program import read_program
from distir.tools.diagnostics import Exit, InputRejected, argparse_error, check_text, distir_version, open_output


HELP_WIDTH = 100
"""The width of ``--help`` and ``--list-passes`` (argparse wraps its part to the terminal)."""

UNRELATED = {"target", "shrink", "frontend", "syntax_highlight"}
"""xDSL's options that do nothing for distir programs (other targets, its fuzzer's
shrinking, other front ends): still accepted, not shown in ``--help``."""

HELP = {
    "disable_verify": "skip verifying the program after parsing (the passes still re-verify after each pass)",
    "version": "print distir-opt's and xDSL's versions and exit",
    "input_file": "the program (.mlir: distir IR, or a JAX/StableHLO or MLIR shard program); standard input if none",
    "output_file": "write the result to this file (default: standard output)",
}


def distir_pass_table(with_xdsl: Sequence[str] = ()) -> str:
    """distir's passes, one line each with their options (from the passes' docstrings
    and fields), then the names of ``with_xdsl`` (xDSL's own passes)."""

    from distir.tools.tables import plain_table

    from distir.passes.pipeline import pass_options, pass_summary
    from distir.passes.registry import ALL_PASSES

    rows = []
    width = HELP_WIDTH - 2 - max(len(n) for n in ALL_PASSES) - 2  # the description's column
    for name, factory in ALL_PASSES.items():
        cls = factory()
        opts = pass_options(cls)
        text = textwrap.wrap(pass_summary(cls), width, break_on_hyphens=False)
        if opts:
            text += textwrap.wrap("options: " + ", ".join(f"{o}={d}" for o, d in opts), width, break_on_hyphens=False, subsequent_indent="  ")
        rows += [[name if i == 0 else "", t] for i, t in enumerate(text)]
    lines = ["distir passes (-p 'name{option=value ...},...'):"] + [f"  {line}".rstrip() for line in plain_table(rows)]
    if with_xdsl:
        lines.append("")
        lines.append("xDSL's passes (canonicalize applies distir's canonicalization patterns too):")
        names = textwrap.wrap(", ".join(with_xdsl), width=96, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
        lines.extend(names)
    return "\n".join(lines)


class ListPassesAction(argparse.Action):
    """``--list-passes [all]``: print distir's passes (and xDSL's with ``all``), exit 0."""

    def __init__(self, *args, tool: DistirOptMain | None = None, **kwargs):
        super().__init__(*args, nargs="?", const="distir", choices=["distir", "all"], **kwargs)
        self.tool = tool

    def __call__(self, parser, namespace, values, option_string=None):
        xdsl = []
        if values == "all" and self.tool is not None:
            from distir.passes.registry import ALL_PASSES

            xdsl = sorted(n for n in self.tool.available_passes if n not in ALL_PASSES)
        print(distir_pass_table(xdsl))
        parser.exit()


class DistirOptMain(xDSLOptMain):
    version_format = f"distir-opt {distir_version()} (xdsl {{xdsl_version}})"

    def register_all_dialects(self):
        super().register_all_dialects()
        from distir.dialects.context import DISTIR_DIALECTS

        for name, factory in DISTIR_DIALECTS.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        super().register_all_passes()
        from distir.passes.registry import ALL_PASSES

        for name, factory in ALL_PASSES.items():
            self.available_passes.setdefault(name, factory)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        for action in arg_parser._actions:  # noqa: SLF001 - xDSL's -p help lists ~150 passes
            if action.dest == "passes":
                action.help = "comma-separated pass pipeline, e.g. 'split-allreduce{strategy=rs-ag},fuse-allreduce' (distir's passes below; --list-passes all adds xDSL's)"
            elif action.dest in UNRELATED:
                action.help = argparse.SUPPRESS
            elif action.dest in HELP:
                action.help = HELP[action.dest]
        arg_parser.add_argument(
            "--list-passes",
            action=ListPassesAction,
            tool=self,
            metavar="all",
            help="list distir's passes with their options and exit ('all': xDSL's passes too)",
        )
        arg_parser.add_argument(
            "--emit",
            choices=["sdy", "mesh"],
            help="print the result as StableHLO + sdy or as MLIR 19's mesh dialect (frontends/export.py) instead of distir IR",
        )
        arg_parser.formatter_class = lambda prog: argparse.RawDescriptionHelpFormatter(prog, width=min(HELP_WIDTH, shutil.get_terminal_size().columns))
        format_help = arg_parser.format_help

        def help_with_passes() -> str:  # the pass table imports every pass: only for --help
            arg_parser.epilog = distir_pass_table() + "\n\nxDSL's own passes: distir-opt --list-passes all"
            return format_help()

        arg_parser.format_help = help_with_passes  # type: ignore[method-assign]

        arg_parser.prog = "distir-opt"
        arg_parser.error = argparse_error("distir-opt", arg_parser)  # type: ignore[method-assign]

    def setup_pipeline(self):
        if self.args.verify_diagnostics:
            # MLIR's --verify-diagnostics covers parse errors as well.
            self.args.parsing_diagnostics = True
        from xdsl.passes import PassPipeline

        from distir.passes.pipeline import parse_pipeline

        try:
            passes = parse_pipeline(self.args.passes, self.available_passes) if self.args.passes else ()
        except InputRejected as e:
            raise InputRejected(f"distir-opt: bad pipeline '{self.args.passes}': {e}") from None
        self.pipeline = PassPipeline(passes)
        self._spans: dict = {}
        self._line_offset = 0

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        name = self.get_input_name()
        text = decode_source(chunk.read(), name)
        module, spans = read_program(text, name, self.ctx, not self.args.no_implicit_module, not self.args.disable_verify, start_offset)
        self._spans, self._line_offset = spans, start_offset
        return module

    def apply_passes(self, prog):
        from xdsl.printer import Printer

        from distir.passes.pipeline import run_passes

        passes = self.pipeline.passes

        def after_each(p, seconds: float) -> None:
            if self.args.time_passes:
                print(f"Pass {p.name} took {seconds} seconds")
            if self.args.print_between_passes and p is not passes[-1]:
                print(f"IR after {p.name}:")
                Printer(stream=sys.stdout).print_op(prog)
                print("\n\n\n")

        run_passes(prog, passes, self.ctx, self._spans, not self.args.disable_verify, self._line_offset, after_each)

    def output_resulting_program(self, prog) -> str:
        if self.args.emit:
            from distir.frontends.export import export_module

            return export_module(prog, self.args.emit, self._spans, self._line_offset)
        return super().output_resulting_program(prog)

    def get_input_stream(self):
        if self.args.input_file == "-":
            self.args.input_file = None  # read standard input
        try:
            f, extension = super().get_input_stream()
            with f:
                data = f.read()
        except OSError as e:
            raise InputRejected(f"distir-opt: cannot read {self.args.input_file}: {e.strerror}") from None
        except (AttributeError, ValueError):  # standard input closed (<&-)
            raise InputRejected("distir-opt: cannot read standard input: it is closed") from None
        try:
            check_text(data, self.get_input_name())  # empty or binary: say so, echo nothing
        except InputRejected as e:
            if not self.args.verify_diagnostics:
                raise
            print(e)  # a diagnostic like the others: on standard output, exit 0
            raise Exit(0) from None
        return io.BytesIO(data), extension

    def prepare_output(self):
        return open_output("distir-opt", self.args.output_file)
