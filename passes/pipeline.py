"""Pass pipelines from ``-p`` text or pass objects: parsing, printing and applying them.

    apply_pipeline(module, "split-allreduce,reorder-allgather")   # verifies after each pass
    parse_pipeline("split-allreduce{dim=1}")                      # -> pass objects
    pipeline_spec(passes)                                          # -> -p text

Every pass a pipeline may name is xDSL's (``canonicalize``, ``cse``, ...) or one of
``passes/registry.py``'s table, which lists every layer's passes by module name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every pass a pipeline may name: xDSL's (``canonicalize``, ``cse``, ``dce``, ...)
    and distir's, as ``distir-opt`` sees them."""
    from xdsl.transforms import get_all_passes

    from distir.passes.registry import ALL_PASSES

    out = dict(get_all_passes())
    out.update(ALL_PASSES)
    return out


def parse_pipeline(spec: str) -> tuple[ModulePass, ...]:
    """Pass objects from ``-p`` text: ``"split-allreduce{dim=1},reorder-allgather"``."""
    return PassPipeline.parse_spec(available_passes(), spec).passes


_BARE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if _BARE.match(v) else '"' + v.replace('"', '\\"') + '"'
    return str(v)


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


def apply_pipeline(module: ModuleOp, pipeline: str | Sequence[ModulePass], ctx: Context | None = None) -> ModuleOp:
    """Run a pipeline (``-p`` text or pass objects) on ``module`` in place, verifying
    after each pass as ``distir-opt`` does; return ``module``."""
    from distir.dialects.context import make_context

    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else tuple(pipeline)
    PassPipeline(passes, lambda _prev, m, _next: m.verify()).apply(ctx or make_context(), module)
    return module
