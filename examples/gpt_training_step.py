"""A GPT training step as a one-device distir program: forward, backward and AdamW.

    python -m distir.examples.gpt_training_step --model gpt2-xl --layers 24 -o gpt_step.mlir
    python -m distir.examples.gpt_training_step --model gpt3-xl -o gpt13b.mlir      # 1.3 B parameters
    python -m distir.examples.gpt_training_step --layers 2 --batch 4 --seq 8 --hidden 16 --heads 2 --vocab 32

The program is what ``distir-plan`` starts from: every value on one device
(``dist.mesh @world shape = [1]``), nothing placed. One function ``@gpt_step``:

* **arguments**: the token ids ``%tokens`` (``i32``, ``[B·S, 1]``: one per row of the embedding
  lookup) and the next-token ``%labels`` (``i32``, ``[B, S, 1]``), the causal mask ``%mask`` (``[S, S]``: 0 on and below the diagonal, a
  large negative number above), the token embedding ``%wte`` (``[V, H]``, frozen: its
  gradient is a scatter-add, which distir has no op for) and the position embedding
  ``%wpe``, per layer ``l`` the parameters of a pre-LayerNorm block (``%l{l}_ln1_g``,
  ``_ln1_b``, ``_wq``, ``_bq``, ``_wk``, ``_bk``, ``_wv``, ``_bv``, ``_wo``, ``_bo``,
  ``_ln2_g``, ``_ln2_b``, ``_w1``, ``_b1``, ``_w2``, ``_b2``), the final LayerNorm
  (``%lnf_g``, ``%lnf_b``), the output head ``%head`` (``[H, V]``, untied), then AdamW's
  two moments of every trained parameter (``%m_<name>``, ``%v_<name>``) and the
  scalars ``%lr, %beta1, %beta2, %eps, %wd, %t``;
* **computation**: embedding (``dist.embedding_bag`` of one token per position) plus
  positions; per layer LayerNorm, causal multi-head attention (queries, keys and values
  by three matmuls, ``[B, NH, S, D]`` heads, softmax with the mask), the output
  projection and the residual, LayerNorm, the MLP (tanh GeLU) and the residual; the
  final LayerNorm, the head and the mean cross-entropy of the labels (their one-hot
  rows from ``dist.iota``). Then the backward pass of all of it, by hand, op by op,
  and AdamW (decoupled weight decay, bias correction with ``%t``) on every trained
  parameter;
* **results**: the loss (a 0-d tensor), then every trained parameter and its two
  moments, each written in place into its argument (``{dist.inplace = N}``).

Models (``--model``): ``gpt2-xl`` (H 1600, 25 heads, V 50257, S 1024; 48 layers, fewer
with ``--layers``) and ``gpt3-xl`` (H 2048, 16 heads, V 50257, S 1024, 24 layers:
1.3 B parameters); ``--batch`` is the global batch (sequences). Every size can be set
(``--hidden`` must be a multiple of ``--heads``; the MLP is 4x the hidden size).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class GPTShape:
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    batch: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def ffn(self) -> int:
        return 4 * self.hidden

    def parameters(self) -> int:
        """Parameters of the model (trained ones and the frozen token embedding)."""
        h, f = self.hidden, self.ffn
        per_layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
        return self.layers * per_layer + 2 * h + h * self.vocab + self.vocab * h + self.seq * h


MODELS = {
    "gpt2-xl": GPTShape(layers=48, hidden=1600, heads=25, vocab=50257, seq=1024, batch=256),
    "gpt3-xl": GPTShape(layers=24, hidden=2048, heads=16, vocab=50257, seq=1024, batch=16),
}

LAYER_PARAMS = ("ln1_g", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2")


class Writer:
    """Emits the program's text: one method per op, each returning the SSA name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.types: dict[str, tuple[tuple[int, ...], str]] = {}
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"%{hint}_{self.count}"

    @staticmethod
    def ty(shape: tuple[int, ...], elt: str = "f32") -> str:
        dims = "".join(f"{d}x" for d in shape)
        return f"!dist.tensor<{dims}{elt}, @world, [replicated]>"

    def t(self, name: str) -> str:
        if name not in self.types:
            return "f32"
        shape, elt = self.types[name]
        return self.ty(shape, elt)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.types[name][0]

    def define(self, name: str, shape: tuple[int, ...], elt: str = "f32") -> str:
        self.types[name] = (tuple(shape), elt)
        return name

    def map(self, hint: str, inputs: list[str], body: list[str], shape: tuple[int, ...] | None = None, elt: str = "f32") -> str:
        """``body``: lines over the block arguments ``%a0, %a1, ...`` ending with the
        yielded value ``%r``."""
        out = self.fresh(hint)
        if shape is None:
            shape = max((self.shape(x) for x in inputs if x in self.types), key=len)
        self.define(out, shape, elt)
        args = ", ".join(f"%a{i}: {self.types[x][1] if x in self.types else 'f32'}" for i, x in enumerate(inputs))
        self.lines.append(f"  {out} = dist.map({', '.join(inputs)}) : ({', '.join(self.t(x) for x in inputs)}) -> {self.t(out)} {{")
        self.lines.append(f"  ^bb0({args}):")
        for line in body:
            self.lines.append(f"    {line}")
        self.lines.append(f"    dist.yield %r : {elt}")
        self.lines.append("  }")
        return out

    def matmul(self, hint: str, a: str, b: str) -> str:
        sa, sb = self.shape(a), self.shape(b)
        out = self.define(self.fresh(hint), (*sa[:-1], sb[-1]))
        self.lines.append(f"  {out} = dist.matmul {a}, {b} : ({self.t(a)}, {self.t(b)}) -> {self.t(out)}")
        return out

    def reduce(self, hint: str, kind: str, x: str, dims: list[int]) -> str:
        s = self.shape(x)
        out = self.define(self.fresh(hint), tuple(d for i, d in enumerate(s) if i not in dims))
        self.lines.append(f"  {out} = dist.reduce_tensor {kind} {x} dims {list(dims)} : {self.t(x)} -> {self.t(out)}")
        return out

    def reshape(self, hint: str, x: str, shape: tuple[int, ...]) -> str:
        out = self.define(self.fresh(hint), shape, self.types[x][1])
        self.lines.append(f"  {out} = dist.reshape {x} : {self.t(x)} -> {self.t(out)}")
        return out

    def transpose(self, hint: str, x: str, perm: list[int]) -> str:
        s = self.shape(x)
        out = self.define(self.fresh(hint), tuple(s[p] for p in perm), self.types[x][1])
        self.lines.append(f"  {out} = dist.transpose {x} perm {list(perm)} : {self.t(x)} -> {self.t(out)}")
        return out

    def keep(self, hint: str, x: str, dims: list[int]) -> str:
        """``x`` reduced over ``dims`` by sum, as ``[.., 1]`` keeping the rank (to
        broadcast back)."""
        r = self.reduce(hint, "sum", x, dims)
        return self.reshape(hint, r, (*self.shape(r), 1))


ADD = ["%r = arith.addf %a0, %a1 : f32"]
MUL = ["%r = arith.mulf %a0, %a1 : f32"]


def generate(m: GPTShape) -> str:
    if m.hidden % m.heads:
        raise ValueError(f"--hidden {m.hidden} is not a multiple of --heads {m.heads}")
    B, S, H, NH, D, F, V = m.batch, m.seq, m.hidden, m.heads, m.head_dim, m.ffn, m.vocab
    w = Writer()
    args: list[tuple[str, str]] = []

    def arg(name: str, shape: tuple[int, ...], elt: str = "f32") -> str:
        full = w.define(f"%{name}", shape, elt)
        args.append((full, w.t(full)))
        return full

    tokens = arg("tokens", (B * S, 1), "i32")
    labels = arg("labels", (B, S, 1), "i32")
    mask = arg("mask", (S, S))
    wte = arg("wte", (V, H))
    trained: list[str] = []

    def param(name: str, shape: tuple[int, ...]) -> str:
        trained.append(name)
        return arg(name, shape)

    wpe = param("wpe", (S, H))
    shapes = {"ln1_g": (H,), "ln1_b": (H,), "wq": (H, H), "bq": (H,), "wk": (H, H), "bk": (H,), "wv": (H, H), "bv": (H,), "wo": (H, H), "bo": (H,),
              "ln2_g": (H,), "ln2_b": (H,), "w1": (H, F), "b1": (F,), "w2": (F, H), "b2": (H,)}
    layers = [{p: param(f"l{i}_{p}", shapes[p]) for p in LAYER_PARAMS} for i in range(m.layers)]
    lnf_g, lnf_b = param("lnf_g", (H,)), param("lnf_b", (H,))
    head = param("head", (H, V))
    moments = {}
    for name in trained:
        moments[name] = (arg(f"m_{name}", w.shape(f"%{name}")), arg(f"v_{name}", w.shape(f"%{name}")))
    scalars = ["lr", "beta1", "beta2", "eps", "wd", "t"]
    for s in scalars:
        args.append((f"%{s}", "f32"))
    inv_h = f"{1.0 / H:.9e}"
    scale = f"{1.0 / D ** 0.5:.9e}"
    inv_bs = f"{1.0 / (B * S):.9e}"

    # ---------------------------------------------------------------- forward
    def layernorm(x: str, g: str, b: str, hint: str):
        mu = w.keep(f"{hint}_mu", x, [2])
        xc = w.map(f"{hint}_xc", [x, mu], [f"%c = arith.constant {inv_h} : f32", "%m = arith.mulf %a1, %c : f32", "%r = arith.subf %a0, %m : f32"])
        sq = w.map(f"{hint}_sq", [xc], ["%r = arith.mulf %a0, %a0 : f32"])
        var = w.keep(f"{hint}_var", sq, [2])
        rstd = w.map(f"{hint}_rstd", [var], [f"%c = arith.constant {inv_h} : f32", "%e = arith.constant 1.0e-05 : f32", "%m = arith.mulf %a0, %c : f32",
                                            "%s = arith.addf %m, %e : f32", "%r = math.rsqrt %s : f32"])
        y = w.map(f"{hint}_y", [xc, rstd, g, b], ["%n = arith.mulf %a0, %a1 : f32", "%s = arith.mulf %n, %a2 : f32", "%r = arith.addf %s, %a3 : f32"])
        return y, xc, rstd

    def linear(x: str, wt: str, b: str, hint: str) -> str:
        y = w.matmul(hint, x, wt)
        return w.map(f"{hint}_b", [y, b], ADD)

    def heads(x: str, hint: str) -> str:  # [B,S,H] -> [B,NH,S,D]
        return w.transpose(hint, w.reshape(hint, x, (B, S, NH, D)), [0, 2, 1, 3])

    def unheads(x: str, hint: str) -> str:  # [B,NH,S,D] -> [B,S,H]
        return w.reshape(hint, w.transpose(hint, x, [0, 2, 1, 3]), (B, S, H))

    e = w.define(w.fresh("emb"), (B * S, H))
    w.lines.append(f"  {e} = dist.embedding_bag {wte}, {tokens} : ({w.t(wte)}, {w.t(tokens)}) -> {w.t(e)}")
    x = w.map("x0", [w.reshape("emb", e, (B, S, H)), wpe], ADD)
    saved = []
    for i, p in enumerate(layers):
        h = f"l{i}"
        xn, xc1, rstd1 = layernorm(x, p["ln1_g"], p["ln1_b"], f"{h}_ln1")
        q = linear(xn, p["wq"], p["bq"], f"{h}_q")
        k = linear(xn, p["wk"], p["bk"], f"{h}_k")
        v = linear(xn, p["wv"], p["bv"], f"{h}_v")
        qh, kh, vh = heads(q, f"{h}_qh"), heads(k, f"{h}_kh"), heads(v, f"{h}_vh")
        kt = w.transpose(f"{h}_kt", kh, [0, 1, 3, 2])
        sc = w.matmul(f"{h}_scores", qh, kt)
        z = w.map(f"{h}_z", [sc, mask], [f"%c = arith.constant {scale} : f32", "%s = arith.mulf %a0, %c : f32", "%r = arith.addf %s, %a1 : f32"])
        mx = w.reshape(f"{h}_mx", w.reduce(f"{h}_mx", "max", z, [3]), (B, NH, S, 1))
        ex = w.map(f"{h}_exp", [z, mx], ["%s = arith.subf %a0, %a1 : f32", "%r = math.exp %s : f32"])
        se = w.keep(f"{h}_se", ex, [3])
        pr = w.map(f"{h}_p", [ex, se], ["%r = arith.divf %a0, %a1 : f32"])
        ctx = w.matmul(f"{h}_ctx", pr, vh)
        ctx2 = unheads(ctx, f"{h}_ctx2")
        attn = linear(ctx2, p["wo"], p["bo"], f"{h}_attn")
        x1 = w.map(f"{h}_x1", [x, attn], ADD)
        xn2, xc2, rstd2 = layernorm(x1, p["ln2_g"], p["ln2_b"], f"{h}_ln2")
        hid = linear(xn2, p["w1"], p["b1"], f"{h}_fc1")
        act = w.map(f"{h}_gelu", [hid], GELU)
        mo = linear(act, p["w2"], p["b2"], f"{h}_fc2")
        x2 = w.map(f"{h}_x2", [x1, mo], ADD)
        saved.append(dict(x=x, xn=xn, xc1=xc1, rstd1=rstd1, qh=qh, kh=kh, vh=vh, pr=pr, ctx2=ctx2, x1=x1, xn2=xn2, xc2=xc2, rstd2=rstd2, hid=hid, act=act))
        x = x2
    xf, xcf, rstdf = layernorm(x, lnf_g, lnf_b, "lnf")
    logits = w.matmul("logits", xf, head)
    lmx = w.reshape("lmx", w.reduce("lmx", "max", logits, [2]), (B, S, 1))
    lex = w.map("lexp", [logits, lmx], ["%s = arith.subf %a0, %a1 : f32", "%r = math.exp %s : f32"])
    lse = w.keep("lse", lex, [2])
    iota = w.define(w.fresh("vocab"), (V,), "i32")
    w.lines.append(f"  {iota} = dist.iota dim 0 : () -> {w.t(iota)}")
    onehot = w.map("onehot", [iota, labels], ["%e = arith.cmpi eq, %a0, %a1 : i32", "%one = arith.constant 1.0 : f32", "%zero = arith.constant 0.0 : f32",
                                              "%r = arith.select %e, %one, %zero : f32"], shape=(B, S, V))
    tl = w.keep("tl", w.map("picked", [logits, onehot], MUL), [2])
    nll = w.map("nll", [lse, lmx, tl], ["%l = math.log %a0 : f32", "%s = arith.addf %l, %a1 : f32", "%r = arith.subf %s, %a2 : f32"])
    loss_sum = w.reduce("loss_sum", "sum", nll, [0, 1, 2])
    loss = w.map("loss", [loss_sum], [f"%c = arith.constant {inv_bs} : f32", "%r = arith.mulf %a0, %c : f32"], shape=())

    # ---------------------------------------------------------------- backward
    grads: dict[str, str] = {}

    def flat(x: str, hint: str) -> str:
        s = w.shape(x)
        return w.reshape(hint, x, (B * S, s[-1]))

    def weight_grad(x: str, dy: str, hint: str) -> str:  # x [B,S,I], dy [B,S,O] -> [I,O]
        xt = w.transpose(hint, flat(x, hint), [1, 0])
        return w.matmul(hint, xt, flat(dy, hint))

    def bias_grad(dy: str, hint: str) -> str:
        return w.reduce(hint, "sum", dy, [0, 1])

    def linear_back(x: str, wt: str, dy: str, name: str, hint: str) -> str:
        grads[name] = weight_grad(x, dy, f"{hint}_dw")
        wtt = w.transpose(f"{hint}_wt", wt, [1, 0])
        return w.matmul(f"{hint}_dx", dy, wtt)

    def layernorm_back(dy: str, g: str, xc: str, rstd: str, gname: str, bname: str, hint: str) -> str:
        grads[gname] = w.reduce(f"{hint}_dg", "sum", w.map(f"{hint}_dgx", [dy, xc, rstd], ["%n = arith.mulf %a1, %a2 : f32", "%r = arith.mulf %a0, %n : f32"]), [0, 1])
        grads[bname] = bias_grad(dy, f"{hint}_db")
        dxh = w.map(f"{hint}_dxh", [dy, g], MUL)
        m1 = w.keep(f"{hint}_m1", dxh, [2])
        m2 = w.keep(f"{hint}_m2", w.map(f"{hint}_dxx", [dxh, xc, rstd], ["%n = arith.mulf %a1, %a2 : f32", "%r = arith.mulf %a0, %n : f32"]), [2])
        return w.map(f"{hint}_dx", [dxh, m1, m2, xc, rstd], [
            f"%c = arith.constant {inv_h} : f32", "%u = arith.mulf %a1, %c : f32", "%d = arith.subf %a0, %u : f32",
            "%n = arith.mulf %a3, %a4 : f32", "%v = arith.mulf %a2, %c : f32", "%nv = arith.mulf %n, %v : f32",
            "%e = arith.subf %d, %nv : f32", "%r = arith.mulf %e, %a4 : f32"])

    dlogits = w.map("dlogits", [lex, lse, onehot], [f"%c = arith.constant {inv_bs} : f32", "%p = arith.divf %a0, %a1 : f32",
                                                    "%d = arith.subf %p, %a2 : f32", "%r = arith.mulf %d, %c : f32"])
    dxf = linear_back(xf, head, dlogits, "head", "head")
    dx = layernorm_back(dxf, lnf_g, xcf, rstdf, "lnf_g", "lnf_b", "lnf_b")
    for i in reversed(range(m.layers)):
        p, s_ = layers[i], saved[i]
        h = f"l{i}"
        n = lambda k: f"l{i}_{k}"  # noqa: E731
        grads[n("b2")] = bias_grad(dx, f"{h}_db2")
        dact = linear_back(s_["act"], p["w2"], dx, n("w2"), f"{h}_fc2")
        dhid = w.map(f"{h}_dgelu", [dact, s_["hid"]], DGELU)
        grads[n("b1")] = bias_grad(dhid, f"{h}_db1")
        dxn2 = linear_back(s_["xn2"], p["w1"], dhid, n("w1"), f"{h}_fc1")
        dx1 = w.map(f"{h}_dx1", [dx, layernorm_back(dxn2, p["ln2_g"], s_["xc2"], s_["rstd2"], n("ln2_g"), n("ln2_b"), f"{h}_ln2")], ADD)
        grads[n("bo")] = bias_grad(dx1, f"{h}_dbo")
        dctx2 = linear_back(s_["ctx2"], p["wo"], dx1, n("wo"), f"{h}_attn")
        dctx = heads(dctx2, f"{h}_dctx")
        dpr = w.matmul(f"{h}_dp", dctx, w.transpose(f"{h}_vt", s_["vh"], [0, 1, 3, 2]))
        dv = w.matmul(f"{h}_dv", w.transpose(f"{h}_pt", s_["pr"], [0, 1, 3, 2]), dctx)
        tsum = w.keep(f"{h}_tsum", w.map(f"{h}_dpp", [dpr, s_["pr"]], MUL), [3])
        dsc = w.map(f"{h}_dsc", [s_["pr"], dpr, tsum], [f"%c = arith.constant {scale} : f32", "%d = arith.subf %a1, %a2 : f32",
                                                          "%e = arith.mulf %a0, %d : f32", "%r = arith.mulf %e, %c : f32"])
        dq = w.matmul(f"{h}_dq", dsc, s_["kh"])
        dk = w.matmul(f"{h}_dk", w.transpose(f"{h}_dst", dsc, [0, 1, 3, 2]), s_["qh"])
        dq2, dk2, dv2 = unheads(dq, f"{h}_dq2"), unheads(dk, f"{h}_dk2"), unheads(dv, f"{h}_dv2")
        grads[n("bq")], grads[n("bk")], grads[n("bv")] = bias_grad(dq2, f"{h}_dbq"), bias_grad(dk2, f"{h}_dbk"), bias_grad(dv2, f"{h}_dbv")
        dxq = linear_back(s_["xn"], p["wq"], dq2, n("wq"), f"{h}_q")
        dxk = linear_back(s_["xn"], p["wk"], dk2, n("wk"), f"{h}_k")
        dxv = linear_back(s_["xn"], p["wv"], dv2, n("wv"), f"{h}_v")
        dxn = w.map(f"{h}_dxn", [dxq, dxk, dxv], ["%s = arith.addf %a0, %a1 : f32", "%r = arith.addf %s, %a2 : f32"])
        dx = w.map(f"{h}_dx", [dx1, layernorm_back(dxn, p["ln1_g"], s_["xc1"], s_["rstd1"], n("ln1_g"), n("ln1_b"), f"{h}_ln1")], ADD)
    grads["wpe"] = w.reduce("dwpe", "sum", dx, [0])

    # ---------------------------------------------------------------- AdamW
    results: list[tuple[str, str]] = [(loss, "")]
    index = {name: i for i, (name, _) in enumerate(args)}
    for name in trained:
        g, pv = grads[name], f"%{name}"
        mv, vv = moments[name]
        m1 = w.map(f"m_{name}", [mv, g, "%beta1"], ["%one = arith.constant 1.0 : f32", "%a = arith.mulf %a2, %a0 : f32", "%c = arith.subf %one, %a2 : f32",
                                                    "%d = arith.mulf %c, %a1 : f32", "%r = arith.addf %a, %d : f32"])
        v1 = w.map(f"v_{name}", [vv, g, "%beta2"], ["%one = arith.constant 1.0 : f32", "%a = arith.mulf %a2, %a0 : f32", "%c = arith.subf %one, %a2 : f32",
                                                    "%gg = arith.mulf %a1, %a1 : f32", "%d = arith.mulf %c, %gg : f32", "%r = arith.addf %a, %d : f32"])
        p1 = w.map(f"p_{name}", [pv, m1, v1, "%lr", "%beta1", "%beta2", "%eps", "%wd", "%t"], [
            "%one = arith.constant 1.0 : f32", "%b1t = math.powf %a4, %a8 : f32", "%b2t = math.powf %a5, %a8 : f32",
            "%c1 = arith.subf %one, %b1t : f32", "%c2 = arith.subf %one, %b2t : f32", "%mh = arith.divf %a1, %c1 : f32",
            "%vh = arith.divf %a2, %c2 : f32", "%s = math.sqrt %vh : f32", "%den = arith.addf %s, %a6 : f32",
            "%st = arith.divf %mh, %den : f32", "%dec = arith.mulf %a7, %a0 : f32", "%u = arith.addf %st, %dec : f32",
            "%upd = arith.mulf %a3, %u : f32", "%r = arith.subf %a0, %upd : f32"])
        results += [(p1, f" {{dist.inplace = {index[pv]} : i64}}"), (m1, f" {{dist.inplace = {index[mv]} : i64}}"), (v1, f" {{dist.inplace = {index[vv]} : i64}}")]

    head_lines = [
        f"// GPT training step (forward, backward, AdamW) on one device: {m.layers} layers, hidden {H}, {NH} heads, vocab {V},",
        f"// sequence {S}, batch {B}; {m.parameters() / 1e9:.2f} B parameters. Generated by python -m distir.examples.gpt_training_step.",
        "dist.mesh @world shape = [1]",
        "",
    ]
    sig = ",\n    ".join(f"{n}: {t}" for n, t in args)
    res = ",\n     ".join(f"{w.t(r)}{attr}" for r, attr in results)
    body = [f"func.func @gpt_step({sig})", f"    -> ({res}) {{", *w.lines, f"  func.return {', '.join(r for r, _ in results)} : {', '.join(w.t(r) for r, _ in results)}", "}"]
    return "\n".join(head_lines + body) + "\n"


GELU = [
    "%half = arith.constant 0.5 : f32", "%one = arith.constant 1.0 : f32", "%k = arith.constant 0.7978845608 : f32", "%c = arith.constant 0.044715 : f32",
    "%z2 = arith.mulf %a0, %a0 : f32", "%z3 = arith.mulf %z2, %a0 : f32", "%cz3 = arith.mulf %c, %z3 : f32", "%in = arith.addf %a0, %cz3 : f32",
    "%arg = arith.mulf %k, %in : f32", "%th = math.tanh %arg : f32", "%opt = arith.addf %one, %th : f32", "%hz = arith.mulf %half, %a0 : f32",
    "%r = arith.mulf %hz, %opt : f32",
]
"""GeLU, tanh approximation, of ``%a0``."""

DGELU = [
    "%half = arith.constant 0.5 : f32", "%one = arith.constant 1.0 : f32", "%k = arith.constant 0.7978845608 : f32", "%c = arith.constant 0.044715 : f32",
    "%c3 = arith.constant 0.134145 : f32", "%z2 = arith.mulf %a1, %a1 : f32", "%z3 = arith.mulf %z2, %a1 : f32", "%cz3 = arith.mulf %c, %z3 : f32",
    "%in = arith.addf %a1, %cz3 : f32", "%arg = arith.mulf %k, %in : f32", "%th = math.tanh %arg : f32", "%opt = arith.addf %one, %th : f32",
    "%th2 = arith.mulf %th, %th : f32", "%sech2 = arith.subf %one, %th2 : f32", "%c3z2 = arith.mulf %c3, %z2 : f32", "%dp = arith.addf %one, %c3z2 : f32",
    "%kd = arith.mulf %k, %dp : f32", "%hz = arith.mulf %half, %a1 : f32", "%t1 = arith.mulf %hz, %sech2 : f32", "%t2 = arith.mulf %t1, %kd : f32",
    "%t0 = arith.mulf %half, %opt : f32", "%d = arith.addf %t0, %t2 : f32", "%r = arith.mulf %a0, %d : f32",
]
"""``%a0`` times the derivative of GeLU at ``%a1``."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distir.examples.gpt_training_step", description="A GPT training step (forward, backward, AdamW) as a one-device distir program.")
    ap.add_argument("--model", choices=sorted(MODELS), help="sizes of a known model (gpt2-xl, gpt3-xl); the options below override them")
    for name in ("layers", "hidden", "heads", "vocab", "seq", "batch"):
        ap.add_argument(f"--{name}", type=int, metavar="N")
    ap.add_argument("-o", "--output", metavar="FILE", help="write the program here (default: standard output)")
    args = ap.parse_args(argv)
    base = MODELS[args.model] if args.model else GPTShape(layers=2, hidden=16, heads=2, vocab=32, seq=8, batch=4)
    over = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "vocab", "seq", "batch") if getattr(args, k) is not None}
    for k, v in over.items():
        if v < 1:
            ap.error(f"--{k} must be positive, got {v}")
    shape = GPTShape(**{**base.__dict__, **over})
    try:
        text = generate(shape)
    except ValueError as e:
        ap.error(str(e))
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
