"""A program of the layout ops (dist.transpose, reshape, iota, extract_slice, concat) on a
``?`` mesh: executed by ``runtime/test_layout_ops.py``, its kernels compiled for CUDA by
``lowering/test_layout_kernels_cuda.py``."""

from __future__ import annotations


def T(shape: str, p: str, elt: str = "f32") -> str:
    return f"!dist.tensor<{shape}x{elt}, @world, [{p}]>"


PROGRAM = f"""
dist.mesh @world shape = [?]
func.func @transpose(%x: {T("8x64", "sliced<1>")}) -> {T("64x8", "sliced<0>")} {{
  %t = dist.transpose %x perm [1, 0] : {T("8x64", "sliced<1>")} -> {T("64x8", "sliced<0>")}
  func.return %t : {T("64x8", "sliced<0>")}
}}
func.func @transpose3(%x: {T("8x4x16", "sliced<2>")}) -> {T("16x8x4", "sliced<0>")} {{
  %t = dist.transpose %x perm [2, 0, 1] : {T("8x4x16", "sliced<2>")} -> {T("16x8x4", "sliced<0>")}
  func.return %t : {T("16x8x4", "sliced<0>")}
}}
func.func @reshape(%x: {T("64x8", "sliced<0>")}) -> {T("8x8x8", "sliced<0>")} {{
  %r = dist.reshape %x : {T("64x8", "sliced<0>")} -> {T("8x8x8", "sliced<0>")}
  func.return %r : {T("8x8x8", "sliced<0>")}
}}
func.func @reshape_strided_block(%x: {T("8x64", "replicated")}) -> {T("8x8x8", "sliced<1>")} {{
  %s = dist.take_slice %x dim 1 : {T("8x64", "replicated")} -> {T("8x64", "sliced<1>")}
  %r = dist.reshape %s : {T("8x64", "sliced<1>")} -> {T("8x8x8", "sliced<1>")}
  func.return %r : {T("8x8x8", "sliced<1>")}
}}
func.func @iota() -> ({T("16x8", "sliced<0>", "i32")}, {T("4x24", "sliced<1>")}) {{
  %a = dist.iota dim 0 : () -> {T("16x8", "sliced<0>", "i32")}
  %b = dist.iota dim 1 : () -> {T("4x24", "sliced<1>")}
  func.return %a, %b : {T("16x8", "sliced<0>", "i32")}, {T("4x24", "sliced<1>")}
}}
func.func @extract(%x: {T("16x8", "sliced<1>")}) -> {T("5x8", "sliced<1>")} {{
  %e = dist.extract_slice %x offsets [1, 0] strides [3, 1] : {T("16x8", "sliced<1>")} -> {T("5x8", "sliced<1>")}
  func.return %e : {T("5x8", "sliced<1>")}
}}
func.func @concat(%a: {T("8x8", "sliced<0>")}, %b: {T("8x16", "sliced<0>")}) -> {T("8x24", "sliced<0>")} {{
  %c = dist.concat %a, %b dim 1 : ({T("8x8", "sliced<0>")}, {T("8x16", "sliced<0>")}) -> {T("8x24", "sliced<0>")}
  func.return %c : {T("8x24", "sliced<0>")}
}}
"""
