"""Example programs (``*.mlir``) and generators of model-scale programs (``optimizer_step``)."""
