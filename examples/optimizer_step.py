"""Generators of model-scale distir programs: the data-parallel optimizer step of a
model's whole parameter list (CoCoNet's AR-SGD / AR-Adam / AR-LAMB, one collective and
a few maps per tensor), and a stack of Megatron MLP blocks.

    python -m distir.examples.optimizer_step --model llama-7b --optimizer adam -o llama_adam.mlir
    python -m distir.examples.optimizer_step --model llama-7b --hidden 64 --vocab 256 --optimizer adam
    python -m distir.examples.optimizer_step --tensors 1000 --size 4096 --optimizer sgd
    python -m distir.examples.optimizer_step --mlp-blocks 16

A step over tensors ``t`` takes, per tensor, the gradient ``%g_t`` (``local``: every rank
its own partial gradient), the parameters ``%p_t`` and the optimizer state (``%m_t``,
``%v_t``; ``replicated``), and the shared scalars (``%lr``, ...); it returns the new
parameters and state, each written in place into its argument (``{dist.inplace = N}``).
Per tensor: ``coll.all_reduce avg`` of the gradient, then the update as ``dist.map``s
(SGD: 2 maps, Adam: 3, LAMB: 3 maps and 2 norms). With ``mixed`` (CoCoNet's mixed
precision), gradients are f16, averaged in f16 and cast to the f32 master weights'
precision (``dist.cast``) before the update.

``--model llama-7b`` lists the parameters of a Llama-style model (embedding, per layer the
attention projections q/k/v/o, the MLP gate/up/down projections and two RMSNorm weights,
the final norm and the output head: 2 + 9 x layers + 1 tensors, 291 for 32 layers) with
their real shapes; ``--hidden``, ``--vocab`` and ``--layers`` shrink it (the MLP width
keeps Llama's ratio, rounded up to a multiple of 8) so that it runs on one machine.
Llama models are trained in mixed precision, so ``--model`` implies ``--mixed``.

Every program parses, verifies and runs on a mesh of any size dividing the tensors'
first dims (``dist.mesh @world shape = [?]``).

``--logical`` writes the same step on logical values, the input of ``distir-plan``: each
gradient ``local`` (fixed: every rank holds its partial gradient) averaged into its
logical value (``dist.reduce avg``), each parameter replicated (fixed: the model reads it
whole) and dropped into its own, the optimizer state ``unplaced`` (the planner places
it: replicated is AR-Adam's data parallelism, sliced ZeRO-1's); the maps compute on
logical values and the new parameters go back replicated (``dist.repl``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

OPTIMIZERS = ("sgd", "adam", "lamb")

SCALARS = {
    "sgd": ("lr", "mu"),
    "adam": ("lr", "beta1", "beta2", "eps", "t"),
    "lamb": ("lr", "beta1", "beta2", "eps", "wd", "t"),
}
STATE = {"sgd": ("m",), "adam": ("m", "v"), "lamb": ("m", "v")}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Llama-style decoder."""

    hidden: int
    intermediate: int
    layers: int
    vocab: int


MODELS = {
    "llama-7b": ModelShape(hidden=4096, intermediate=11008, layers=32, vocab=32000),
    "llama-13b": ModelShape(hidden=5120, intermediate=13824, layers=40, vocab=32000),
}


def llama_parameters(model: str = "llama-7b", hidden: int | None = None, vocab: int | None = None, layers: int | None = None) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter of a Llama-style model, in the order of its
    state dict; ``hidden``/``vocab``/``layers`` override the model's sizes (the MLP width
    keeps the model's ratio to the hidden size, rounded up to a multiple of 8)."""
    if model not in MODELS:
        raise ValueError(f"unknown model '{model}' (known: {', '.join(MODELS)})")
    m = MODELS[model]
    h = hidden or m.hidden
    inter = m.intermediate if hidden is None else -(-round(h * m.intermediate / m.hidden) // 8) * 8
    n_layers = m.layers if layers is None else layers
    v = vocab or m.vocab
    out: list[tuple[str, tuple[int, ...]]] = [("embed_tokens", (v, h))]
    for i in range(n_layers):
        out += [
            (f"layers_{i}_q_proj", (h, h)),
            (f"layers_{i}_k_proj", (h, h)),
            (f"layers_{i}_v_proj", (h, h)),
            (f"layers_{i}_o_proj", (h, h)),
            (f"layers_{i}_gate_proj", (inter, h)),
            (f"layers_{i}_up_proj", (inter, h)),
            (f"layers_{i}_down_proj", (h, inter)),
            (f"layers_{i}_input_layernorm", (h,)),
            (f"layers_{i}_post_attention_layernorm", (h,)),
        ]
    out += [("norm", (h,)), ("lm_head", (v, h))]
    return out


def uniform_parameters(tensors: int, size: int) -> list[tuple[str, tuple[int, ...]]]:
    """``tensors`` 1-d parameters of ``size`` elements each (``t0``, ``t1``, ...)."""
    return [(f"t{i}", (size,)) for i in range(tensors)]


def _ty(shape: Sequence[int], elt: str, placement: str) -> str:
    dims = "x".join(str(d) for d in shape)
    return f"!dist.tensor<{dims}x{elt}, @world, [{placement}]>" if dims else f"!dist.tensor<{elt}, @world, [{placement}]>"


def _name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", s)


# Map bodies, per optimizer: (operand roles, result roles, body lines). Roles name the
# per-tensor values (g = averaged gradient in f32, m, v, p, ...) and the shared scalars.
_BODIES: dict[str, list[tuple[tuple[str, ...], tuple[str, ...], list[str]]]] = {
    "sgd": [
        (("m", "g", "mu"), ("m1",), ["%a = arith.mulf %x2, %x0 : f32", "%b = arith.addf %a, %x1 : f32", "dist.yield %b : f32"]),
        (("p", "m1", "lr"), ("p1",), ["%a = arith.mulf %x2, %x1 : f32", "%b = arith.subf %x0, %a : f32", "dist.yield %b : f32"]),
    ],
    "adam": [
        (
            ("m", "g", "beta1"),
            ("m1",),
            [
                "%one = arith.constant 1.0 : f32",
                "%a = arith.mulf %x2, %x0 : f32",
                "%c = arith.subf %one, %x2 : f32",
                "%d = arith.mulf %c, %x1 : f32",
                "%e = arith.addf %a, %d : f32",
                "dist.yield %e : f32",
            ],
        ),
        (
            ("v", "g", "beta2"),
            ("v1",),
            [
                "%one = arith.constant 1.0 : f32",
                "%a = arith.mulf %x2, %x0 : f32",
                "%c = arith.subf %one, %x2 : f32",
                "%gg = arith.mulf %x1, %x1 : f32",
                "%d = arith.mulf %c, %gg : f32",
                "%e = arith.addf %a, %d : f32",
                "dist.yield %e : f32",
            ],
        ),
        (
            ("p", "m1", "v1", "lr", "beta1", "beta2", "eps", "t"),
            ("p1",),
            [
                "%one = arith.constant 1.0 : f32",
                "%b1t = math.powf %x4, %x7 : f32",
                "%b2t = math.powf %x5, %x7 : f32",
                "%c1 = arith.subf %one, %b1t : f32",
                "%c2 = arith.subf %one, %b2t : f32",
                "%mhat = arith.divf %x1, %c1 : f32",
                "%vhat = arith.divf %x2, %c2 : f32",
                "%s = math.sqrt %vhat : f32",
                "%den = arith.addf %s, %x6 : f32",
                "%step = arith.divf %mhat, %den : f32",
                "%upd = arith.mulf %x3, %step : f32",
                "%np = arith.subf %x0, %upd : f32",
                "dist.yield %np : f32",
            ],
        ),
    ],
    "lamb": [
        (
            ("m", "v", "g", "p", "beta1", "beta2", "eps", "wd", "t"),
            ("m1", "v1", "u"),
            [
                "%one = arith.constant 1.0 : f32",
                "%a1 = arith.mulf %x4, %x0 : f32",
                "%c1 = arith.subf %one, %x4 : f32",
                "%d1 = arith.mulf %c1, %x2 : f32",
                "%mn = arith.addf %a1, %d1 : f32",
                "%a2 = arith.mulf %x5, %x1 : f32",
                "%c2 = arith.subf %one, %x5 : f32",
                "%gg = arith.mulf %x2, %x2 : f32",
                "%d2 = arith.mulf %c2, %gg : f32",
                "%vn = arith.addf %a2, %d2 : f32",
                "%b1t = math.powf %x4, %x8 : f32",
                "%b2t = math.powf %x5, %x8 : f32",
                "%k1 = arith.subf %one, %b1t : f32",
                "%k2 = arith.subf %one, %b2t : f32",
                "%mhat = arith.divf %mn, %k1 : f32",
                "%vhat = arith.divf %vn, %k2 : f32",
                "%s = math.sqrt %vhat : f32",
                "%den = arith.addf %s, %x6 : f32",
                "%r = arith.divf %mhat, %den : f32",
                "%wp = arith.mulf %x7, %x3 : f32",
                "%un = arith.addf %r, %wp : f32",
                "dist.yield %mn, %vn, %un : f32, f32, f32",
            ],
        ),
        (
            ("p", "u"),
            ("p2", "u2"),
            ["%pp = arith.mulf %x0, %x0 : f32", "%uu = arith.mulf %x1, %x1 : f32", "dist.yield %pp, %uu : f32, f32"],
        ),
        (
            ("p", "u", "pn2", "un2", "lr"),
            ("p1",),
            [
                "%r1 = math.sqrt %x2 : f32",
                "%r2 = math.sqrt %x3 : f32",
                "%trust = arith.divf %r1, %r2 : f32",
                "%a = arith.mulf %x4, %trust : f32",
                "%b = arith.mulf %a, %x1 : f32",
                "%c = arith.subf %x0, %b : f32",
                "dist.yield %c : f32",
            ],
        ),
    ],
}


def optimizer_step(optimizer: str, params: Sequence[tuple[str, Sequence[int]]], mixed: bool = False, func_name: str | None = None, logical: bool = False) -> str:
    """The text of one data-parallel optimizer step over ``params`` ((name, shape) per
    tensor); see the module doc. ``logical``: the same step on logical values, for
    ``distir-plan`` (the module doc's last paragraph)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{optimizer}' (known: {', '.join(OPTIMIZERS)})")
    if not params:
        raise ValueError("an optimizer step needs at least one tensor")
    gelt = "f16" if mixed else "f32"
    state = STATE[optimizer]
    names = [_name(n) for n, _ in params]
    if len(set(names)) != len(names):
        raise ValueError("parameter names must be distinct")
    args: list[str] = []
    index: dict[str, int] = {}
    free = "unplaced" if logical else "replicated"
    for n, (_, shape) in zip(names, params):
        for role, elt, placement in [("g", gelt, "local"), ("p", "f32", "replicated"), *((s, "f32", free) for s in state)]:
            index[f"{role}_{n}"] = len(args)
            args.append(f"%{role}_{n}: {_ty(shape, elt, placement)}")
    for s in SCALARS[optimizer]:
        args.append(f"%{s}: f32")
    results: list[str] = []
    returned: list[str] = []
    body: list[str] = []
    for n, (_, shape) in zip(names, params):
        R = _ty(shape, "f32", "unplaced" if logical else "replicated")
        local_t = _ty(shape, gelt, "local")
        values = {"p": f"%p_{n}", **{s: f"%{s}_{n}" for s in state}, **{s: f"%{s}" for s in SCALARS[optimizer]}}
        if logical:
            # the partial gradients averaged into their logical value, the replicated
            # parameter dropped into its own: the computation runs on logical values
            body.append(f"%gl_{n} = dist.reduce avg %g_{n} : {local_t} -> {_ty(shape, gelt, 'unplaced')}")
            body.append(f"%pl_{n} = dist.drop %p_{n} : {_ty(shape, 'f32', 'replicated')} -> {R}")
            values["p"] = f"%pl_{n}"
            if mixed:
                body.append(f"%avg_{n} = dist.cast %gl_{n} : {_ty(shape, 'f16', 'unplaced')} -> {R}")
        elif mixed:
            body.append(f"%avg16_{n} = coll.all_reduce avg %g_{n} : {local_t} -> {_ty(shape, 'f16', 'replicated')}")
            body.append(f"%avg_{n} = dist.cast %avg16_{n} : {_ty(shape, 'f16', 'replicated')} -> {R}")
        else:
            body.append(f"%avg_{n} = coll.all_reduce avg %g_{n} : {local_t} -> {R}")
        values["g"] = f"%gl_{n}" if logical and not mixed else f"%avg_{n}"
        for ins, outs, lines in _BODIES[optimizer]:
            if optimizer == "lamb" and ins[0] == "p" and "pn2" in ins:
                N = _ty((), "f32", "unplaced" if logical else "replicated")
                dims = ", ".join(str(d) for d in range(len(shape)))
                body.append(f"%pn2_{n} = dist.reduce_tensor sum {values['p2']} dims [{dims}] : {R} -> {N}")
                body.append(f"%un2_{n} = dist.reduce_tensor sum {values['u2']} dims [{dims}] : {R} -> {N}")
                values["pn2"], values["un2"] = f"%pn2_{n}", f"%un2_{n}"
            operands = [values[r] for r in ins]
            types = [_operand_type(r, shape, optimizer).replace("replicated", "unplaced" if logical else "replicated") for r in ins]
            out_names = [f"%{r}_{n}" for r in outs]
            lhs = ", ".join(out_names)
            res_t = ", ".join([R] * len(outs))
            res_sig = f"({res_t})" if len(outs) > 1 else res_t
            args_bb = ", ".join(f"%x{i}: f32" for i in range(len(ins)))
            body.append(f"{lhs} = dist.map({', '.join(operands)}) : ({', '.join(types)}) -> {res_sig} {{")
            body.append(f"^bb0({args_bb}):")
            body += [f"  {line}" for line in lines]
            body.append("}")
            for r, v in zip(outs, out_names):
                values[r] = v
        for role in ("p", *state):
            placement = "replicated" if not logical or role == "p" else "unplaced"
            results.append(f"{_ty(shape, 'f32', placement)} {{dist.inplace = {index[f'{role}_{n}']} : i64}}")
            if logical and role == "p":
                # the new parameters go back replicated, as the model reads them
                body.append(f"%pr_{n} = dist.repl {values['p1']} : {R} -> {_ty(shape, 'f32', 'replicated')}")
                returned.append(f"%pr_{n}")
            else:
                returned.append(values[f"{role}1"])
    fname = func_name or f"{optimizer}_step"
    ret_types = ", ".join(_ty(shape, "f32", "replicated" if not logical or role == "p" else "unplaced") for _, shape in params for role in ("p", *state))
    lines = [
        f"// Data-parallel {optimizer.upper()} step over {len(params)} tensors"
        + (" (mixed precision: f16 gradients, f32 master weights)" if mixed else "")
        + ", generated by distir.examples.optimizer_step.",
        "dist.mesh @world shape = [?]",
        "",
        f"func.func @{fname}(" + ",\n    ".join(args) + ")",
        "    -> (" + ",\n        ".join(results) + ") {",
    ]
    lines += [f"  {line}" for line in body]
    lines.append(f"  func.return {', '.join(returned)} : {ret_types}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _operand_type(role: str, shape: Sequence[int], optimizer: str) -> str:
    if role in SCALARS[optimizer]:
        return "f32"
    if role in ("pn2", "un2"):
        return _ty((), "f32", "replicated")
    return _ty(shape, "f32", "replicated")


def megatron_mlp_stack(blocks: int, batch: int = 2, seq: int = 8, hidden: int = 16) -> str:
    """``blocks`` Megatron MLP blocks in a row (``examples/megatron_mlp.mlir`` each: a
    column-sliced GEMM, GeLU on slices, a row-sliced GEMM, an AllReduce, bias, dropout
    and the residual), every block with its own weights."""
    h4 = 4 * hidden
    X = _ty((batch, seq, hidden), "f32", "replicated")
    H = _ty((batch, seq, h4), "f32", "sliced<2>")
    L = _ty((batch, seq, hidden), "f32", "local")
    args = [f"%x: {X}"]
    body: list[str] = []
    cur = "%x"
    for i in range(blocks):
        W1, B1 = _ty((hidden, h4), "f32", "sliced<1>"), _ty((h4,), "f32", "sliced<0>")
        W2, B2 = _ty((h4, hidden), "f32", "sliced<0>"), _ty((hidden,), "f32", "replicated")
        args += [f"%w1_{i}: {W1}", f"%b1_{i}: {B1}", f"%w2_{i}: {W2}", f"%b2_{i}: {B2}"]
        body += [
            f"%h_{i} = dist.matmul {cur}, %w1_{i} : ({X}, {W1}) -> {H}",
            f"%a_{i} = dist.map(%h_{i}, %b1_{i}) : ({H}, {B1}) -> {H} {{",
            "^bb0(%hi: f32, %bi: f32):",
            "  %z = arith.addf %hi, %bi : f32",
            "  %half = arith.constant 0.5 : f32",
            "  %one = arith.constant 1.0 : f32",
            "  %k = arith.constant 0.7978845608 : f32",
            "  %c = arith.constant 0.044715 : f32",
            "  %z2 = arith.mulf %z, %z : f32",
            "  %z3 = arith.mulf %z2, %z : f32",
            "  %cz3 = arith.mulf %c, %z3 : f32",
            "  %in = arith.addf %z, %cz3 : f32",
            "  %arg = arith.mulf %k, %in : f32",
            "  %th = math.tanh %arg : f32",
            "  %opt = arith.addf %one, %th : f32",
            "  %hz = arith.mulf %half, %z : f32",
            "  %gelu = arith.mulf %hz, %opt : f32",
            "  dist.yield %gelu : f32",
            "}",
            f"%o_{i} = dist.matmul %a_{i}, %w2_{i} : ({H}, {W2}) -> {L}",
            f"%sum_{i} = coll.all_reduce sum %o_{i} : {L} -> {X}",
            f"%biased_{i} = dist.map(%sum_{i}, %b2_{i}) : ({X}, {B2}) -> {X} {{",
            "^bb0(%si: f32, %bi: f32):",
            "  %r = arith.addf %si, %bi : f32",
            "  dist.yield %r : f32",
            "}",
            f"%drop_{i} = dist.dropout %biased_{i} p 0.1 seed {42 + i} : {X} -> {X}",
            f"%out_{i} = dist.map(%drop_{i}, {cur}) : ({X}, {X}) -> {X} {{",
            "^bb0(%di: f32, %xi: f32):",
            "  %r = arith.addf %di, %xi : f32",
            "  dist.yield %r : f32",
            "}",
        ]
        cur = f"%out_{i}"
    lines = [
        f"// {blocks} Megatron MLP blocks (MM-AR-C each), generated by distir.examples.optimizer_step.",
        "dist.mesh @world shape = [?]",
        "",
        "func.func @mlp_stack(" + ",\n    ".join(args) + f") -> {X} {{",
    ]
    lines += [f"  {line}" for line in body]
    lines += [f"  func.return {cur} : {X}", "}"]
    return "\n".join(lines) + "\n"


def pipeline_layers(layers: int, batch: int = 2, seq: int = 8, hidden: int = 16) -> str:
    """``layers`` copies of ``examples/pipeline_layer.mlir`` (pipeline + tensor parallelism
    on a 2 x ? mesh: an AllReduce inside stage 0, a send to stage 1, bias, dropout and
    the residual there), each with its own inputs and result."""
    mesh = "@grid"

    def ty(shape, placements):
        return f"!dist.tensor<{'x'.join(map(str, shape))}xf32, {mesh}, [{placements}]>"

    act = (batch, seq, hidden)
    IN, S0R, S1R = ty(act, "at<0>, local"), ty(act, "at<0>, replicated"), ty(act, "at<1>, replicated")
    B = ty((hidden,), "at<1>, replicated")
    args, body, rets = [], [], []
    for i in range(layers):
        args += [f"%in_{i}: {IN}", f"%b_{i}: {B}", f"%r_{i}: {S1R}"]
        body += [
            f"%sum_{i} = coll.all_reduce sum %in_{i} axes [1] : {IN} -> {S0R}",
            f"%recv_{i} = coll.send %sum_{i} to 1 axes [0] : {S0R} -> {S1R}",
            f"%biased_{i} = dist.map(%recv_{i}, %b_{i}) : ({S1R}, {B}) -> {S1R} {{",
            "^bb0(%x: f32, %y: f32):",
            "  %z = arith.addf %x, %y : f32",
            "  dist.yield %z : f32",
            "}",
            f"%drop_{i} = dist.dropout %biased_{i} p 0.1 seed {7 + i} : {S1R} -> {S1R}",
            f"%out_{i} = dist.map(%drop_{i}, %r_{i}) : ({S1R}, {S1R}) -> {S1R} {{",
            "^bb0(%x: f32, %y: f32):",
            "  %z = arith.addf %x, %y : f32",
            "  dist.yield %z : f32",
            "}",
        ]
        rets.append(f"%out_{i}")
    lines = [
        f"// {layers} pipeline-parallel layers (AR-P2P-C each), generated by distir.examples.optimizer_step.",
        f"dist.mesh {mesh} shape = [2, ?] axes = [\"pp\", \"tp\"]",
        "",
        "func.func @layers(" + ",\n    ".join(args) + ")",
        "    -> (" + ", ".join([S1R] * layers) + ") {",
    ]
    lines += [f"  {line}" for line in body]
    lines += [f"  func.return {', '.join(rets)} : {', '.join([S1R] * layers)}", "}"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distir.examples.optimizer_step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--model", choices=sorted(MODELS), help="a Llama-style model's parameter list (implies --mixed)")
    what.add_argument("--tensors", type=int, help="this many 1-d tensors of --size elements")
    what.add_argument("--mlp-blocks", type=int, help="a stack of this many Megatron MLP blocks instead of an optimizer step")
    ap.add_argument("--size", type=int, default=4096, help="elements per tensor with --tensors (default 4096)")
    ap.add_argument("--hidden", type=int, help="hidden size of --model (default: the model's)")
    ap.add_argument("--vocab", type=int, help="vocabulary size of --model (default: the model's)")
    ap.add_argument("--layers", type=int, help="layers of --model (default: the model's)")
    ap.add_argument("--mixed", action="store_true", help="f16 gradients, f32 master weights (CoCoNet's mixed precision)")
    ap.add_argument("--logical", action="store_true", help="the step on logical values, for distir-plan: partial gradients and replicated parameters fixed, the optimizer state for the planner to place")
    ap.add_argument("-o", "--output", help="write the program here (default: stdout)")
    args = ap.parse_args(argv)
    if args.mlp_blocks is not None:
        if args.mlp_blocks < 1:
            ap.error("--mlp-blocks must be at least 1")
        text = megatron_mlp_stack(args.mlp_blocks)
    else:
        if args.tensors is not None:
            if args.tensors < 1 or args.size < 1:
                ap.error("--tensors and --size must be at least 1")
            params = uniform_parameters(args.tensors, args.size)
            mixed = args.mixed
        else:
            params = llama_parameters(args.model or "llama-7b", args.hidden, args.vocab, args.layers)
            mixed = True
        text = optimizer_step(args.optimizer, params, mixed=mixed, logical=args.logical)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
