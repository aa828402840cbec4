"""``nested_chains()``: a hypothesis strategy of small programs whose dims are sliced
nested over several mesh axes in blocks the ranks do not divide (10 rows over [3, 2]:
outer blocks 4, 4, 2, inner ones 2, 2 | 2, 2 | 1, 1), which ``training_steps`` seldom
makes. Each is one to three chains of collectives and local ops on tensors of 1 or 2
dims: a reduce-scatter (over one axis or two) nests a new slicing inside the axes that
already slice its dim, an all-gather undoes the innermost ones, an all-to-all moves the
innermost to the other dim, ``dist.take_slice`` slices a replicated axis, all-reduces,
reduces and broadcasts act on the axes that are partial, maps and matmuls (a replicated
or alike-sliced weight) keep or contract the slicing, and a map joins two chains whose
values agree in type. Every value is a result, so a misplaced block shows.
"""

from __future__ import annotations

import math
import random

from hypothesis import strategies as st

from support.programs import Program

MESHES = ((3, 2), (2, 3), (4, 2), (3, 2), (2, 3), (4, 2), (3, 3), (2, 2, 2))
SIZES = (10, 10, 10, 14, 14, 7, 11, 13, 5, 3, 1)
"""Sizes whose blocks over these meshes differ when nested (10 over [3, 2] and 14 over
[4, 2]: a short last outer block whose inner blocks do not sit at their padded places)."""

DOUBLE = """ {
  ^bb0(%z: f32):
    %two = arith.constant 2.0 : f32
    %r = arith.mulf %z, %two : f32
    dist.yield %r : f32
  }"""
DIFFERENCE = """ {
  ^bb0(%p: f32, %q: f32):
    %r = arith.subf %p, %q : f32
    dist.yield %r : f32
  }"""


def _type(shape, pl) -> str:
    """``pl``: per axis ("local",), ("replicated",), ("at", r) or ("s", dim, level)."""
    out = []
    for p in pl:
        if p[0] == "s":
            order = [a for _, a in sorted((q[2], a) for a, q in enumerate(pl) if q[0] == "s" and q[1] == p[1])]
            out.append(f"sliced<{p[1]}>" if order == sorted(order) else f"sliced<{p[1]}, {p[2]}>")
        elif p[0] == "at":
            out.append(f"at<{p[1]}>")
        else:
            out.append(p[0])
    return f"!dist.tensor<{'x'.join(map(str, shape))}xf32, @g, [{', '.join(out)}]>"


class _Chains:
    def __init__(self, rng: random.Random, mesh):
        self.rng, self.mesh = rng, mesh
        self.lines: list[str] = []
        self.args: list[tuple] = []
        self.results: list[tuple] = []

    def value(self, text: str, shape, pl) -> str:
        v = f"%v{len(self.results)}"
        self.lines.append(f"  {v} = {text}")
        self.results.append((v, shape, list(pl)))
        return v

    def coll(self, op: str, v: str, shape, before, after) -> str:
        return self.value(f"{op.replace('%SRC', v)} : {_type(shape, before)} -> {_type(shape, after)}", shape, after)

    @staticmethod
    def levels(pl, d) -> list[int]:
        """The axes slicing dim ``d``, outermost first."""
        return [a for _, a in sorted((p[2], a) for a, p in enumerate(pl) if p[0] == "s" and p[1] == d)]

    def step(self, v: str, shape, pl):
        rng = self.rng
        partial = [a for a, p in enumerate(pl) if p[0] == "local"]
        replicated = [a for a, p in enumerate(pl) if p[0] == "replicated"]
        dims = sorted({p[1] for p in pl if p[0] == "s"})
        kinds = ["map"]
        kinds += ["reduce_scatter", "reduce_scatter", "all_reduce", "reduce"] if partial else []
        kinds += ["take_slice"] if replicated else []
        kinds += ["all_gather", "all_gather"] + (["all_to_all", "all_to_all"] if len(shape) == 2 else []) if dims else []
        kinds += ["matmul"] if len(shape) == 2 and not partial and not any(p[0] == "at" for p in pl) else []
        kind = rng.choice(kinds)
        new = list(pl)

        def nest_dim() -> int:  # mostly a dim already sliced: nesting
            return rng.choice(dims) if dims and rng.random() < 0.8 else rng.randrange(len(shape))

        if kind == "reduce_scatter":
            axes = rng.sample(partial, rng.randint(1, min(2, len(partial))))
            d = nest_dim()
            base = len(self.levels(pl, d))
            for i, a in enumerate(axes):
                new[a] = ("s", d, base + i)
            return self.coll(f"coll.reduce_scatter sum %SRC dim {d} axes {axes}", v, shape, pl, new), shape, new
        if kind == "all_reduce":
            axes = sorted(rng.sample(partial, rng.randint(1, len(partial))))
            for a in axes:
                new[a] = ("replicated",)
            return self.coll(f"coll.all_reduce sum %SRC axes {axes}", v, shape, pl, new), shape, new
        if kind == "reduce":
            a = rng.choice(partial)
            root = rng.randrange(self.mesh[a])
            new[a] = ("at", root)
            v = self.coll(f"coll.reduce sum %SRC root {root} axes [{a}]", v, shape, pl, new)
            pl, new = new, list(new)
            new[a] = ("replicated",)
            return self.coll(f"coll.broadcast %SRC axes [{a}]", v, shape, pl, new), shape, new
        if kind == "take_slice":
            a = rng.choice(replicated)
            d = nest_dim()
            new[a] = ("s", d, len(self.levels(pl, d)))
            return self.coll(f"dist.take_slice %SRC dim {d} axis {a}", v, shape, pl, new), shape, new
        if kind == "all_gather":
            order = self.levels(pl, rng.choice(dims))
            axes = order[len(order) - rng.randint(1, len(order)):]
            for a in axes:
                new[a] = ("replicated",)
            return self.coll(f"coll.all_gather %SRC axes {axes}", v, shape, pl, new), shape, new
        if kind == "all_to_all":
            d = rng.choice(dims)
            a = self.levels(pl, d)[-1]
            new[a] = ("s", 1 - d, len(self.levels(pl, 1 - d)))
            return self.coll(f"coll.all_to_all %SRC dim {1 - d} axes [{a}]", v, shape, pl, new), shape, new
        if kind == "matmul":  # a weight sliced alike on the contracted dim, else replicated
            wpl = [("s", 0, p[2]) if p[0] == "s" and p[1] == 1 else ("replicated",) if p[0] == "s" else p for p in pl]
            new = [("local",) if p[0] == "s" and p[1] == 1 else p for p in pl]
            wshape, out = [shape[1], rng.choice([1, 3])], [shape[0], 0]
            out[1] = wshape[1]
            w = f"%w{len(self.args)}"
            self.args.append((w, wshape, wpl))
            return self.value(f"dist.matmul {v}, {w} : ({_type(shape, pl)}, {_type(wshape, wpl)}) -> {_type(out, new)}", out, new), out, new
        t = _type(shape, pl)
        return self.value(f"dist.map({v}) : ({t}) -> {t}{DOUBLE}", shape, pl), shape, pl


@st.composite
def nested_chains(draw) -> Program:
    rng = draw(st.randoms(use_true_random=False))
    mesh = rng.choice(MESHES)
    g = _Chains(rng, mesh)
    chains: list[list] = []
    for c in range(rng.choice([1, 2, 2, 3])):
        shape = list(chains[0][1]) if chains and rng.random() < 0.6 else [rng.choice(SIZES) for _ in range(rng.choice([1, 2]))]
        start = rng.choice(["local", "replicated", "mixed"])
        pl = [(rng.choice(["local", "replicated"]) if start == "mixed" else start,) for _ in mesh]
        if rng.random() < 0.8:
            pl[rng.randrange(len(mesh))] = ("s", rng.randrange(len(shape)), 0)
        g.args.append((f"%x{c}", shape, list(pl)))
        chains.append([f"%x{c}", shape, pl])
    for _ in range(rng.randint(4, 10)):
        chain = rng.choice(chains)
        chain[:] = g.step(*chain)
        other = next((o for o in chains if o is not chain and o[1:] == chain[1:]), None)
        if other is not None and rng.random() < 0.5:
            t = _type(chain[1], chain[2])
            chain[0] = g.value(f"dist.map({chain[0]}, {other[0]}) : ({t}, {t}) -> {t}{DIFFERENCE}", chain[1], chain[2])
    results = g.results or [g.args[0]]
    args = ", ".join(f"{n}: {_type(s, p)}" for n, s, p in g.args)
    types = ", ".join(_type(s, p) for _, s, p in results)
    body = "\n".join(g.lines)
    text = (
        f"dist.mesh @g shape = {list(mesh)}\nfunc.func @f({args}) -> ({types}) {{\n{body}\n"
        f"  func.return {', '.join(r[0] for r in results)} : {types}\n}}\n"
    )
    return Program(text, "f", math.prod(mesh))
