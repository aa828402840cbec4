"""``distir-opt``: parse, verify, transform and print distir IR.

A thin wrapper over xDSL's opt driver that registers the distir dialects and passes and
turns every rejected input into a diagnostic and an exit code (DESIGN §5):
0 success, 1 input rejected (parse, verify, bad option or pass request), 3 internal
error (a distir bug; please report it). ``--verify-diagnostics`` prints the diagnostics
of each ``--split-input-file`` chunk to stdout and exits 0, so that they can be checked
with FileCheck.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import (
    DiagnosticException,
    ParseError,
    PassFailedException,
    VerifyException,
)
from xdsl.utils.lexer import Input, Span
from xdsl.xdsl_opt_main import xDSLOptMain

from distir.tools.diagnostics import InputRejected, run_tool


class LocatingParser(Parser):
    """The MLIR parser, remembering where each operation starts so that verification
    errors can point at the source line, as MLIR's do."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.op_spans: dict[Operation, Span] = {}

    def parse_optional_operation(self) -> Operation | None:
        start = self._current_token.span
        op = super().parse_optional_operation()
        if op is not None:
            self.op_spans[op] = start
        return op


def decode_source(data: bytes, name: str) -> str:
    """The input as text; bytes that are not UTF-8 are a located parse error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", errors="replace")
        pos = len(data[: e.start].decode("utf-8", errors="replace"))
        raise ParseError(Span(pos, pos + 1, Input(text, name)), f"input is not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def verify_located(module: Operation, spans: dict[Operation, Span], line_offset: int = 0) -> None:
    """Verify like ``module.verify()`` (nested ops first), but report the failing op's
    source position: ``file:line:col`` and the line, then the message."""
    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            msg = str(e).removeprefix("Operation does not verify: ")
            span = spans.get(op)
            if span is not None:
                msg = dataclasses.replace(span, line_offset=line_offset).print_with_context(msg)
            raise VerifyException(msg) from None


class DistirOptMain(xDSLOptMain):
    version_format = "distir-opt (xdsl {xdsl_version})"

    def register_all_dialects(self):
        super().register_all_dialects()
        from distir.tools.universe import DISTIR_DIALECTS

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

        def error(message: str):
            raise InputRejected(f"distir-opt: {message}")

        arg_parser.error = error  # type: ignore[method-assign]

    def setup_pipeline(self):
        if self.args.verify_diagnostics:
            # MLIR's --verify-diagnostics covers parse errors as well.
            self.args.parsing_diagnostics = True
        try:
            super().setup_pipeline()
        except Exception as e:  # unknown pass or bad pass option
            raise InputRejected(f"distir-opt: bad pipeline '{self.args.passes}': {e}") from None

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        parser = LocatingParser(self.ctx, decode_source(chunk.read(), self.get_input_name()), self.get_input_name())
        module = parser.parse_module(not self.args.no_implicit_module)
        if not self.args.disable_verify:
            verify_located(module, parser.op_spans, start_offset)
        return module

    def get_input_stream(self):
        if self.args.input_file == "-":
            self.args.input_file = None  # read standard input
        try:
            return super().get_input_stream()
        except OSError as e:
            raise InputRejected(f"distir-opt: cannot read {self.args.input_file}: {e.strerror}") from None


def _opt(argv: Sequence[str] | None) -> int:
    tool = DistirOptMain(description="distir optimizer driver", args=argv)
    try:
        tool.run()
    except (ParseError, DiagnosticException, PassFailedException) as e:
        raise InputRejected(str(e)) from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("distir-opt", lambda: _opt(argv))


if __name__ == "__main__":
    sys.exit(main())
