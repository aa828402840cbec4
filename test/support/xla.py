"""Running an exported StableHLO + sdy module with XLA on host devices, fed and read
with distir's npz convention, so that its outputs compare with the interpreter's.

    outputs = run_exported(module, text, "adam", inputs, ranks=4)

``module`` is the distir module the text was exported from (it gives each argument's
and result's placements); ``inputs`` are logical values (``runtime/npz.py``). Every
device gets its buffer of each argument as the distir program's rank of the same id
holds it (an ``at<r>`` argument: on every device, as the export declares it), the
compiled module runs once, and the per-device results are collected with
``npz.collect`` (which checks that replicas agree). An argument or result with a dim the
ranks do not divide is fed and read as the compiled executable holds it (XLA turns an
uneven sharding at the boundary into one it divides, or into replication: its
``get_parameter_shardings`` say which), since jax.Array refuses uneven shardings.

jax must be imported with ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` for N
host devices: ``host_devices`` starts a fresh interpreter for that when jax is already
imported with fewer (pytest runs the module in a subprocess, see the tests).

``no_farther(exact, ref, got)`` judges outputs that differ beyond the f32 tolerance by a
float64 run of the program (``test/frontends/xla_batch.py`` says when and why).
"""

from __future__ import annotations

import os
import re

import numpy as np

from distir.dialects import layout
from distir.dialects.dist import TensorType
from distir.dialects.placements import REPLICATED, At, Local
from distir.runtime import npz
from distir.runtime.equivalence import tolerance

DEVICES = 16


def jax_with_devices(n: int = DEVICES):
    """jax, with ``n`` host devices (set before jax is first imported)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    import jax

    jax.config.update("jax_enable_x64", True)  # i64 and f64 arguments keep their type

    return jax


def parse_and_verify(text: str) -> None:
    """Parse ``text`` with jaxlib's MLIR (StableHLO, chlo and sdy registered) and verify it;
    raises on a parse or verification error."""
    jax_with_devices()
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir

    with jmlir.make_ir_context():
        module = ir.Module.parse(text)
        if not module.operation.verify():
            raise AssertionError("the exported module does not verify")


def _held_everywhere(t: TensorType) -> TensorType:
    return t.with_(placements=[REPLICATED if isinstance(p, At) else p for p in t.get_placements()])


def _uneven_root(t: TensorType, mesh_op, sizes) -> list | None:
    """``t``'s placements on its root mesh when a sliced dim is uneven there, else None."""
    placements = mesh_op.to_root(t.get_placements())
    return placements if layout.uneven_dims(t.get_shape(), placements, sizes) else None


def _spec(t: TensorType, names: tuple[str, ...], mesh_op):
    from jax.sharding import PartitionSpec

    placements = mesh_op.to_root(t.get_placements())
    dims = []
    for d in range(t.rank):
        axes = layout.slicing_axes(placements, d)
        dims.append(tuple(names[a] for a in axes) if axes else None)
    unreduced = {names[a] for a, p in enumerate(placements) if isinstance(p, Local)}
    return PartitionSpec(*dims, unreduced=unreduced) if unreduced else PartitionSpec(*dims)


def run_exported(module, text: str, func_name: str, inputs: dict[str, np.ndarray], ranks: int) -> list[np.ndarray]:
    """Compile ``text`` (exported from ``module``) with XLA for ``ranks`` devices, run
    ``func_name`` on the logical ``inputs`` and return its logical outputs."""
    jax = jax_with_devices()
    from jax._src import compiler
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    from jax._src.sharding_impls import GSPMDSharding
    from jax.sharding import AxisType, Mesh, NamedSharding

    from distir.dialects.dist import lookup_mesh

    f = npz.select_function(module, func_name)
    grids = npz.resolve_grids(module, ranks)
    devices = jax.devices()[:ranks]
    assert len(devices) == ranks, f"jax has {len(jax.devices())} devices, the run needs {ranks}"
    # XLA runs the module's public @main: rename the function, hide the others
    text = re.sub(r"func\.func @([\w$.]+)\(", lambda m: "func.func @main(" if m.group(1) == func_name else f"func.func private @{m.group(1)}(", text)
    with jmlir.make_ir_context():
        options = compiler.get_compile_options(1, ranks, device_assignment=np.array([devices]))
        exe = devices[0].client.compile_and_load(ir.Module.parse(text), executable_devices=xc.DeviceList(tuple(devices)), compile_options=options)

    def jax_mesh(mesh_op):
        root = mesh_op.root()
        sizes = grids[root.mesh_name].sizes
        names = root.axis_names or tuple(("x", "y", "z")[a] if len(sizes) <= 3 else f"axis{a}" for a in range(len(sizes)))
        return Mesh(np.array(devices).reshape(sizes), names, axis_types=(AxisType.Explicit,) * len(sizes)), names

    tensors = [t for t in [*f.function_type.inputs.data, *f.function_type.outputs.data] if isinstance(t, TensorType)]
    args = []
    for name, t in npz.signature(f):
        a = inputs[name]
        if not isinstance(t, TensorType):  # a builtin scalar: replicated
            m, _ = jax_mesh(lookup_mesh(f, tensors[0]))
            args.append(jax.device_put(np.asarray(a), NamedSharding(m, jax.sharding.PartitionSpec())))
            continue
        held = _held_everywhere(t)
        mesh_op = lookup_mesh(f, t)
        m, names = jax_mesh(mesh_op)
        sharding = NamedSharding(m, _spec(held, names, mesh_op))
        root_sizes = grids[mesh_op.root().mesh_name].sizes
        uneven = _uneven_root(held, mesh_op, root_sizes)
        if uneven is not None:  # jax.Array refuses an uneven sharding: the executable's own
            value = np.asarray(a)
            held_by = GSPMDSharding(tuple(devices), exe.get_parameter_shardings()[len(args)])
            args.append(jax.make_array_from_callback(t.get_shape(), held_by, lambda index, value=value: value[index]))
            continue
        buffers = npz.distribute(a, held, npz.grid_of(grids, held))
        shards = [jax.device_put(np.array(buffers[r], order="C"), devices[r]) for r in range(ranks)]  # (ascontiguousarray makes 0-d 1-d)
        args.append(jax.make_array_from_single_device_arrays(t.get_shape(), sharding, shards))
    results = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    outputs = []
    for i, (t, per_device) in enumerate(zip(npz.result_types(f), results)):
        bufs = {r: np.asarray(b) for r, b in enumerate(per_device)}
        if isinstance(t, TensorType):
            held = _held_everywhere(t)
            mesh_op = lookup_mesh(f, t)
            root_sizes = grids[mesh_op.root().mesh_name].sizes
            uneven = _uneven_root(held, mesh_op, root_sizes)
            if uneven is not None:
                held_by = GSPMDSharding(tuple(devices), exe.get_output_shardings()[i])
                out = np.zeros(t.get_shape(), dtype=bufs[0].dtype)
                for r, index in enumerate(held_by.devices_indices_map(tuple(t.get_shape())).values()):
                    out[index] = bufs[r]
                outputs.append(out)
                continue
            outputs.append(npz.collect(held, npz.grid_of(grids, held), bufs, f"result{i}"))
        else:
            outputs.append(npz.collect(t, None, bufs[0], f"result{i}"))
    return outputs


def no_farther(exact: list[np.ndarray], ref: list, got: list) -> str | None:
    """None when every element of each f32 output of ``got`` is within the interpreter's
    largest error on that output (``ref`` against ``exact``) plus the f32 tolerance
    (scaled by the exact output); else where it is not."""
    rtol, atol = tolerance(np.dtype(np.float32))
    for i, (e, r, g) in enumerate(zip(exact, ref, got, strict=True)):
        r, g = np.asarray(r), np.asarray(g)
        if g.dtype != np.float32 or not g.size:
            continue  # compared exactly or at their own precision: the first comparison holds
        e = np.asarray(e, np.float64)
        with np.errstate(all="ignore"):
            worst = float(np.nanmax(np.abs(r - e), initial=0.0))
            limit = worst + rtol * np.abs(e) + atol * np.max(np.abs(e[np.isfinite(e)]), initial=0.0)
            bad = ~(np.abs(g - e) <= limit) & ~((g == r) | (np.isnan(g) & np.isnan(r)))
        if bad.any():
            k = tuple(int(x) for x in np.argwhere(bad)[0])
            return f"result{i} at {list(k)}: XLA {g[k]} is {abs(g[k] - e[k]):.3g} from the float64 result {e[k]:.8g}, the interpreter at most {worst:.3g} from it"
    return None
