"""distir.frontends: programs from the ecosystem's IRs into dist/coll.

Shardy (``sdy``) + the StableHLO ops JAX emits, MLIR's ``shard`` dialect, the
``partition`` pass (placement propagation + collective insertion) and the exporters back
to StableHLO + sdy and to MLIR's ``mesh`` text (DESIGN §1, §5). Floor: above ``passes``,
below ``lowering``.
"""
