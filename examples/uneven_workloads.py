"""The workloads of issue 28 (dims the ranks do not divide), as distir programs of any
size: a GPT-2 style embedding with its output projection (vocabulary sliced), an Adam
step, and Megatron's MLP. At their real sizes (``FULL``) they are what
``bench/uneven_workloads.py`` runs; the tests run the same structures at small odd sizes.

    from distir.examples.uneven_workloads import embedding_projection, adam, megatron_mlp
    text = embedding_projection(vocab=50257, dim=768, tokens=8)   # @lm
    text = adam(1_000_003)                                         # @adam (examples/adam.mlir)
    text = megatron_mlp(tokens=4, hidden=4544, ffn=18176)          # @mlp (examples/megatron_mlp.mlir)

* ``embedding_projection``: token ids look rows up in a table sliced by rows over the
  ranks (``dist.embedding_bag``: each rank adds the rows it holds, an all-reduce sums
  them), then the output projection ``h @ W`` with ``W [dim, vocab]`` sliced by vocabulary
  columns gives sliced logits, all-gathered. 50,257 rows over 4 ranks are blocks of
  12,565, 12,565, 12,565 and 12,562.
* ``adam``: ``examples/adam.mlir`` (AR-Adam) with its tensor of ``n`` elements.
* ``megatron_mlp``: ``examples/megatron_mlp.mlir`` (column-sliced first GEMM, row-sliced
  second, one all-reduce) with ``tokens`` tokens, model dim ``hidden`` and MLP width
  ``ffn`` (Falcon-7B: 4,544 and 18,176, which 3 and 6 ranks do not divide).

Every program is on ``dist.mesh @world shape = [?]``: it runs on any rank count.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent

FULL = {
    "embedding": {"vocab": 50257, "dim": 768, "tokens": 8},
    "adam": {"n": 1_000_003},
    "mlp": {"tokens": 4, "hidden": 4544, "ffn": 18176},
}
"""The sizes of the issue (GPT-2's vocabulary and width, a prime-ish Adam step, Falcon-7B's
MLP) for a few tokens."""


def embedding_projection(vocab: int, dim: int, tokens: int) -> str:
    t = lambda shape, pl, elt="f32": f"!dist.tensor<{shape}x{elt}, @world, [{pl}]>"  # noqa: E731
    table, ids, w = t(f"{vocab}x{dim}", "sliced<0>"), t(f"{tokens}x1", "replicated", "i32"), t(f"{dim}x{vocab}", "sliced<1>")
    part, h = t(f"{tokens}x{dim}", "local"), t(f"{tokens}x{dim}", "replicated")
    logits_s, logits = t(f"{tokens}x{vocab}", "sliced<1>"), t(f"{tokens}x{vocab}", "replicated")
    return f"""// A GPT-2 style embedding lookup and output projection, the vocabulary sliced over the ranks.
dist.mesh @world shape = [?]
func.func @lm(%ids: {ids}, %table: {table}, %w: {w}) -> {logits} {{
  %part = dist.embedding_bag %table, %ids mode sum : ({table}, {ids}) -> {part}
  %h = coll.all_reduce sum %part : {part} -> {h}
  %logits_s = dist.matmul %h, %w : ({h}, {w}) -> {logits_s}
  %logits = coll.all_gather %logits_s : {logits_s} -> {logits}
  func.return %logits : {logits}
}}
"""


def adam(n: int) -> str:
    text = (HERE / "adam.mlir").read_text()
    assert "1048576" in text
    return text.replace("1048576", str(n))


def megatron_mlp(tokens: int, hidden: int, ffn: int) -> str:
    text = (HERE / "megatron_mlp.mlir").read_text()
    for old, new in (("4x512x1024", f"1x{tokens}x{hidden}"), ("4x512x4096", f"1x{tokens}x{ffn}"), ("1024x4096", f"{hidden}x{ffn}"), ("4096x1024", f"{ffn}x{hidden}"), ("<4096x", f"<{ffn}x"), ("<1024x", f"<{hidden}x")):
        assert old in text, old
        text = text.replace(old, new)
    return text


def workload(name: str, **sizes: int) -> tuple[str, str]:
    """(program text, function name) of workload ``name`` (``FULL``'s keys)."""
    make = {"embedding": (embedding_projection, "lm"), "adam": (adam, "adam"), "mlp": (megatron_mlp, "mlp")}[name]
    return make[0](**sizes), make[1]
