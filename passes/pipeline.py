"""Pass pipelines from ``-p`` text or pass objects: parsing, printing and applying them.

    apply_pipeline(module, "split-allreduce,reorder-allgather")   # verifies after each pass
    parse_pipeline("split-allreduce{dim=1}")                      # -> pass objects
    pipeline_spec(passes)                                          # -> -p text

Every pass a pipeline may name is xDSL's (``canonicalize``, ``cse``, ...) or one of
``passes/registry.py``'s table, which lists every layer's passes by module name. An
unknown pass or option name is an ``InputRejected`` that suggests the closest name.

The pass manager (``run_passes``, used by ``apply_pipeline``, ``distir-opt``, the
default lowering and every tool) verifies the module before the first pass and again
after each pass (``dialects/verifier.py``: scopes, then every op that changed), so that
no pass sees, and no backend runs, a program that does not verify. A pass that produces
one is a bug in distir: a ``PassProducedInvalidIR`` (an ``InternalError``, exit 3)
naming the pass, with the located diagnostic of the first failing op. The exception is
a pass that applies the user's request to the program (``REQUEST_DECIDES_VALIDITY``:
``fix-mesh-sizes{ranks=3}`` on a program sliced 4 ways): there the request is wrong, a
``VerifyException`` naming the pass (exit 1). Diagnostics are located at the source
line of the failing op (or of its nearest ancestor that came from the source). A pass
failure raised with an ``op`` attribute is located at that op.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import time
from collections.abc import Callable, Mapping, Sequence

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException, VerifyException
from xdsl.utils.lexer import Span

from distir.dialects.diagnostics import InputRejected


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every pass a pipeline may name: xDSL's (``canonicalize``, ``cse``, ``dce``, ...)
    and distir's, as ``distir-opt`` sees them."""
    from xdsl.transforms import get_all_passes

    from distir.passes.registry import ALL_PASSES

    out = dict(get_all_passes())
    out.update(ALL_PASSES)
    return out


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def option_names(cls: type[ModulePass]) -> list[str]:
    """The ``-p`` option names of a pass, in declaration order (``targets``, ``dim``)."""
    return [f.name.replace("_", "-") for f in dataclasses.fields(cls) if f.name != "name" and f.init]


def pass_summary(cls: type[ModulePass]) -> str:
    """One line saying what a pass does: the first sentence of the pass class's
    docstring, else of its module's (one file per pass) without the leading
    ``name{options}:``."""
    import sys

    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(cls.__name__ + "("):  # the dataclass's generated one
        doc = (sys.modules[cls.__module__].__doc__ or "").strip()
    para = " ".join(doc.split("\n\n")[0].split())
    para = re.sub(r"^``[^`]*``:\s*", "", para).replace("``", "")
    para = re.sub(r"\s*\(see the module doc(string)?\)", "", para)
    para = re.sub(r";?\s*see the module doc(string)?\.?", "", para)
    first = re.split(r"(?<=\.)\s+(?=[A-Z])|::", para)[0].rstrip(".:; ")
    return first[:1].upper() + first[1:] + "." if first else ""


def pass_options(cls: type[ModulePass]) -> list[tuple[str, str]]:
    """(option, default as ``-p`` text) for each option of a pass."""
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "name" or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            d = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            d = f.default_factory()  # type: ignore[misc]
        else:
            out.append((f.name.replace("_", "-"), "(required)"))
            continue
        text = "(auto)" if d is None else ",".join(_value(x) for x in d) if isinstance(d, tuple) else _value(d)
        out.append((f.name.replace("_", "-"), text if text != "" else "(none)"))
    return out


def parse_pipeline(spec: str, available: Mapping[str, Callable[[], type[ModulePass]]] | None = None) -> tuple[ModulePass, ...]:
    """Pass objects from ``-p`` text: ``"split-allreduce{dim=1},reorder-allgather"``.
    An unknown pass or option, or a malformed value, is an ``InputRejected``."""
    from xdsl.utils.arg_spec import ArgSpecParseError
    from xdsl.utils.arg_spec import parse_pipeline as parse_specs

    available = available if available is not None else available_passes()
    try:
        specs = tuple(parse_specs(spec))
    except ArgSpecParseError as e:  # a BaseException in xDSL
        raise InputRejected(" ".join(str(e).split())) from None
    passes = []
    for s in specs:
        factory = available.get(s.name)
        if factory is None:
            raise InputRejected(f"unknown pass '{s.name}'{did_you_mean(s.name, sorted(available))}")
        cls = factory()
        known = option_names(cls)
        for given in s.normalize_parameter_names().parameters:
            option = given.replace("_", "-")
            if option not in known:
                listed = ", ".join(known) if known else "none"
                raise InputRejected(f"pass '{s.name}' has no option '{option}'{did_you_mean(option, known)} (its options: {listed})")
        try:
            passes.append(cls.from_pass_spec(s))
        except (ValueError, TypeError) as e:
            raise InputRejected(f"pass '{s.name}': {e}") from None
    return tuple(passes)


_BARE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if _BARE.match(v) and _reads_as_text(v) else '"' + v.replace('"', '\\"') + '"'
    return str(v)


def _reads_as_text(v: str) -> bool:
    """Whether ``-p``'s parser reads the bare word ``v`` back as that string (``19``
    reads as a number, ``true`` as a flag: they are printed quoted, ``targets="19"``)."""
    from xdsl.utils.arg_spec import ArgSpecParseError
    from xdsl.utils.arg_spec import parse_pipeline as parse_specs

    try:
        (spec,) = parse_specs(f"p{{o={v}}}")
    except (ArgSpecParseError, ValueError):
        return False
    return spec.parameters.get("o") == (v,)


def pass_spec(p: ModulePass) -> str:
    """The ``-p`` text of one pass, options other than their defaults only:
    ``split-allreduce{dim=1 targets=sum}``."""
    opts = []
    for f in dataclasses.fields(p):
        v = getattr(p, f.name)
        default = f.default if f.default is not dataclasses.MISSING else None
        if v == default:
            continue
        name = f.name.replace("_", "-")
        if isinstance(v, tuple):
            opts.append(f"{name}={','.join(_value(x) for x in v)}")
        else:
            opts.append(f"{name}={_value(v)}")
    return p.name + ("{" + " ".join(opts) + "}" if opts else "")


def pipeline_spec(passes: Sequence[ModulePass]) -> str:
    return ",".join(pass_spec(p) for p in passes)


def run_passes(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    ctx: Context,
    spans: Mapping[Operation, Span] | None = None,
    verify: bool = True,
    line_offset: int = 0,
    after_each: Callable[[ModulePass, float], None] | None = None,
    scopes: bool = True,
    input_verified: bool = False,
) -> None:
    """The pass manager: apply ``passes`` in order, verifying the module first and after
    each pass (see the module doc). ``spans`` locates diagnostics (default: the spans
    recorded when the module was parsed); ``after_each(pass, seconds)`` runs after each
    pass; ``scopes=False`` leaves the scope check to the caller (it checks the ops);
    ``input_verified``: the caller has just verified the module (``verified_clone``)."""
    from distir.dialects.frontend import source_spans
    from distir.dialects.verifier import ensure_verified, located

    if spans is None:
        spans = source_spans(module)
    if verify and not input_verified:
        ensure_verified(module, spans, line_offset)  # cheap when it verified and did not change
    for p in passes:
        start = time.perf_counter()
        try:
            p.apply(ctx, module)
        except PassFailedException as e:
            op = getattr(e, "op", None)
            if isinstance(op, Operation):
                err = type(e)(located(op, str(e), spans, line_offset))
                err.op = op  # type: ignore[attr-defined]
                raise err from None
            raise
        elapsed = time.perf_counter() - start
        if verify:
            verify_after(p, module, spans, line_offset, scopes)
        if after_each is not None:
            after_each(p, elapsed)


def verify_after(p: ModulePass, module: ModuleOp, spans: Mapping[Operation, Span] | None = None, line_offset: int = 0, scopes: bool = True) -> None:
    """Verify what pass ``p`` changed in ``module``; ``PassProducedInvalidIR`` naming it
    when the result does not verify (a ``VerifyException`` for a pass whose request
    decides, see the module doc)."""
    from distir.dialects.diagnostics import PassProducedInvalidIR
    from distir.dialects.verifier import ensure_verified

    note = f"in the program that pass '{p.name}' produced"
    try:
        ensure_verified(module, spans, line_offset, note=note, scopes=scopes)
    except VerifyException as e:
        if getattr(p, "REQUEST_DECIDES_VALIDITY", False):
            raise
        raise PassProducedInvalidIR(p.name, str(e).replace(f" ({note})", "")) from None


def apply_pipeline(module: ModuleOp, pipeline: str | Sequence[ModulePass], ctx: Context | None = None) -> ModuleOp:
    """Run a pipeline (``-p`` text or pass objects) on ``module`` in place, verifying
    it first and after each pass as ``distir-opt`` does (``run_passes``); return
    ``module``."""
    from distir.dialects.context import make_context

    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else tuple(pipeline)
    run_passes(module, passes, ctx or make_context())
    return module
