// The contract's invalid programs, run from the project's own copy in examples/.
// RUN: distir-opt %examples/invalid.mlir --split-input-file --verify-diagnostics | filecheck %examples/invalid.mlir
