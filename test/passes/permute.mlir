// RUN: distir-opt %s -p expand-collectives | filecheck %s --check-prefix=EXPAND
// RUN: distir-opt %s -p expand-collectives,form-collectives | filecheck %s --check-prefix=FORM
// RUN: distir-opt %s -p canonicalize | filecheck %s --check-prefix=CANON
// coll.permute through the rewrite passes: it is no composition of the functional
// primitives, so expand-collectives keeps it (and expands the collectives around it),
// form-collectives gives the program back, and canonicalize erases only the permutes
// that move nothing.

dist.mesh @world shape = [4]
dist.mesh @grid shape = [2, 4]
dist.mesh @column shape = [1, 4]

// EXPAND-LABEL: func.func @ring_then_all_reduce
// EXPAND: %[[P:.*]] = coll.permute %[[X:.*]] offset 1 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
// EXPAND: %[[R:.*]] = dist.reduce sum %[[P]]
// EXPAND: %{{.*}} = dist.repl %[[R]]
// EXPAND-NOT: coll.all_reduce
// FORM-LABEL: func.func @ring_then_all_reduce
// FORM: %[[P:.*]] = coll.permute %{{.*}} offset 1 :
// FORM: %{{.*}} = coll.all_reduce sum %[[P]] :
// FORM-NOT: dist.reduce
func.func @ring_then_all_reduce(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [replicated]> {
  %p = coll.permute %x offset 1 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  %s = coll.all_reduce sum %p : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [replicated]>
  func.return %s : !dist.tensor<8xf32, @world, [replicated]>
}

// EXPAND-LABEL: func.func @pairs_on_one_axis
// EXPAND: coll.permute %{{.*}} pairs [[0, 3], [3, 0]] axes [1] :
// FORM-LABEL: func.func @pairs_on_one_axis
// FORM: coll.permute %{{.*}} pairs [[0, 3], [3, 0]] axes [1] :
func.func @pairs_on_one_axis(%x: !dist.tensor<8xf32, @grid, [local, local]>) -> !dist.tensor<8xf32, @grid, [local, local]> {
  %y = coll.permute %x pairs [[0, 3], [3, 0]] axes [1] : !dist.tensor<8xf32, @grid, [local, local]> -> !dist.tensor<8xf32, @grid, [local, local]>
  func.return %y : !dist.tensor<8xf32, @grid, [local, local]>
}

// A whole turn of the ring, and every rank its own target: nothing moves.
// CANON-LABEL: func.func @identities
// CANON-SAME: (%[[X:.*]]: !dist.tensor<8xf32, @world, [local]>)
// CANON-NOT: coll.permute
// CANON: func.return %[[X]], %[[X]]
func.func @identities(%x: !dist.tensor<8xf32, @world, [local]>) -> (!dist.tensor<8xf32, @world, [local]>, !dist.tensor<8xf32, @world, [local]>) {
  %a = coll.permute %x offset -4 : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  %b = coll.permute %x pairs [[0, 0], [1, 1], [2, 2], [3, 3]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return %a, %b : !dist.tensor<8xf32, @world, [local]>, !dist.tensor<8xf32, @world, [local]>
}

// Rank 3 is its own target but gets no pair: it receives zeros, so the permute stays
// although its result has its operand's type.
// CANON-LABEL: func.func @partial_identity_is_no_identity
// CANON: %[[Y:.*]] = coll.permute %{{.*}} pairs [[0, 0], [1, 1], [2, 2]] :
// CANON: func.return %[[Y]]
func.func @partial_identity_is_no_identity(%x: !dist.tensor<8xf32, @world, [local]>) -> !dist.tensor<8xf32, @world, [local]> {
  %y = coll.permute %x pairs [[0, 0], [1, 1], [2, 2]] : !dist.tensor<8xf32, @world, [local]> -> !dist.tensor<8xf32, @world, [local]>
  func.return %y : !dist.tensor<8xf32, @world, [local]>
}

// On a group of one rank a permute with its pair is a copy (erased; the all_reduce
// after it stays: it retypes the value); one without its pair gives zeros and stays.
// CANON-LABEL: func.func @unit_group
// CANON-SAME: (%[[X:.*]]: !dist.tensor
// CANON-NOT: coll.permute
// CANON: coll.all_reduce sum %[[X]] :
// CANON-LABEL: func.func @unit_group_without_pair
// CANON: %[[P:.*]] = coll.permute %{{.*}} pairs [] :
// CANON: coll.all_reduce sum %[[P]] :
func.func @unit_group(%x: !dist.tensor<8xf32, @column, [local, local]>) -> !dist.tensor<8xf32, @column, [replicated, local]> {
  %p = coll.permute %x pairs [[0, 0]] : !dist.tensor<8xf32, @column, [local, local]> -> !dist.tensor<8xf32, @column, [local, local]>
  %s = coll.all_reduce sum %p : !dist.tensor<8xf32, @column, [local, local]> -> !dist.tensor<8xf32, @column, [replicated, local]>
  func.return %s : !dist.tensor<8xf32, @column, [replicated, local]>
}
func.func @unit_group_without_pair(%x: !dist.tensor<8xf32, @column, [local, local]>) -> !dist.tensor<8xf32, @column, [replicated, local]> {
  %p = coll.permute %x pairs [] : !dist.tensor<8xf32, @column, [local, local]> -> !dist.tensor<8xf32, @column, [local, local]>
  %s = coll.all_reduce sum %p : !dist.tensor<8xf32, @column, [local, local]> -> !dist.tensor<8xf32, @column, [replicated, local]>
  func.return %s : !dist.tensor<8xf32, @column, [replicated, local]>
}

// A permute of local values of 13x3 (shapes the ranks do not divide move as they are).
// EXPAND-LABEL: func.func @uneven_permute
// EXPAND-NEXT:    %[[Y:.*]] = coll.permute %x offset 1 : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [local]>
// EXPAND-NEXT:    func.return %[[Y]]
func.func @uneven_permute(%x: !dist.tensor<13x3xf32, @world, [local]>) -> !dist.tensor<13x3xf32, @world, [local]> {
  %y = coll.permute %x offset 1 : !dist.tensor<13x3xf32, @world, [local]> -> !dist.tensor<13x3xf32, @world, [local]>
  func.return %y : !dist.tensor<13x3xf32, @world, [local]>
}
