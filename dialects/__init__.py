"""The distir dialects: ``dist`` (meshes, distributed tensors, primitives, local ops) and
``coll`` (collectives, fused collectives, overlap)."""
