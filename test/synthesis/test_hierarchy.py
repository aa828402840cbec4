"""synthesis/hierarchy.py: Table 2's device groups, synthesis hierarchy (d), pruning."""

from distir.synthesis.hierarchy import (
    INSIDE,
    MASTER,
    PARALLEL,
    Form,
    SynthesisHierarchy,
    SynthesisLevel,
    row_hierarchy,
    slice_forms,
    synthesis_hierarchy,
)
from distir.synthesis.matrices import DevicePlacement

# Figure 2a: [(rack, 1), (server, 2), (CPU, 2), (GPU, 4)]; GPUs A0..A3 under CPU A, ...
FIG2 = SynthesisHierarchy(tuple(SynthesisLevel(n, c) for n, c in [("rack", 1), ("server", 2), ("CPU", 2), ("GPU", 4)]))
RACK, SERVER, CPU = 0, 1, 2


def names(groups):
    return ", ".join("{" + ", ".join("ABCD"[d // 4] + str(d % 4) for d in g) + "}" for g in groups)


def test_table2_reproduced_exactly():
    table2 = [
        (CPU, Form(INSIDE), "{A0, A1, A2, A3}, {B0, B1, B2, B3}, {C0, C1, C2, C3}, {D0, D1, D2, D3}"),
        (CPU, Form(PARALLEL, SERVER), "{A0, B0}, {A1, B1}, {A2, B2}, {A3, B3}, {C0, D0}, {C1, D1}, {C2, D2}, {C3, D3}"),
        (CPU, Form(PARALLEL, RACK), "{A0, B0, C0, D0}, {A1, B1, C1, D1}, {A2, B2, C2, D2}, {A3, B3, C3, D3}"),
        (CPU, Form(MASTER, RACK), "{A0, B0, C0, D0}"),
        (SERVER, Form(INSIDE), "{A0, A1, A2, A3, B0, B1, B2, B3}, {C0, C1, C2, C3, D0, D1, D2, D3}"),
        (SERVER, Form(PARALLEL, RACK), "{A0, C0}, {A1, C1}, {A2, C2}, {A3, C3}, {B0, D0}, {B1, D1}, {B2, D2}, {B3, D3}"),
        (RACK, Form(INSIDE), "{A0, A1, A2, A3, B0, B1, B2, B3, C0, C1, C2, C3, D0, D1, D2, D3}"),
    ]
    for slice_, form, expected in table2:
        assert names(FIG2.groups(slice_, form)) == expected, (FIG2.names[slice_], FIG2.form_name(form))


def test_master_forms_one_group_per_unit():
    assert names(FIG2.groups(CPU, Form(MASTER, SERVER))) == "{A0, B0}, {C0, D0}"


def test_synthesis_hierarchy_d_collapses_reduction_factors_per_level():
    # Table 1: reduction rows [1 2 3] and [7 8 9] collapse to [7 16 27]
    p = DevicePlacement.standard(((1, 2, 3), (4, 5, 6), (7, 8, 9)), (28, 80, 162))
    h = synthesis_hierarchy(p, [0, 2])
    assert h.cardinalities == (1, 7, 16, 27) and h.names == ("root", "l0", "l1", "l2")
    assert [p.factors[k].name for k in h.levels[2].factors] == ["l1_p0", "l1_p2"]
    # Figure 2d, reducing the parameter shards [1 2 1 2]: levels of size 1 are left out
    fig2d = DevicePlacement.standard(((1, 1, 2, 2), (1, 2, 1, 2)), (1, 2, 2, 4), ("rack", "server", "CPU", "GPU"))
    assert synthesis_hierarchy(fig2d, [1]).describe() == "[(root, 1), (server, 2), (GPU, 2)]"


def test_instructions_of_a_two_level_hierarchy():
    h = SynthesisHierarchy((SynthesisLevel("root", 1), SynthesisLevel("node", 4), SynthesisLevel("gpu", 16)))
    pairs = [(h.names[s], h.form_name(f)) for s, f in slice_forms(h)]
    # slices at the leaf repeat other groups (or are single devices) and are dropped
    assert pairs == [("root", "InsideGroup"), ("node", "InsideGroup"), ("node", "Parallel(root)"), ("node", "Master(root)")]


def test_appendix_pruning_on_the_row_hierarchy():
    # hierarchy (c) of [[2,2],[2,8]] reducing axis 0: levels root, node_p0, gpu_p0 (reduction), node_p1, gpu_p1
    p = DevicePlacement.standard(((2, 2), (2, 8)), (4, 16), ("node", "gpu"))
    c = row_hierarchy(p, [0])
    assert c.names == ("root", "node_p0", "gpu_p0", "node_p1", "gpu_p1")
    kept = {(c.names[s], c.form_name(f)) for s, f in slice_forms(c)}
    everything = {(c.names[s], c.form_name(f)) for s, f in slice_forms(c, prune=False)}
    # Lemma B.5: InsideGroup only where every level below is a reduction level
    assert ("gpu_p0", "InsideGroup") not in kept and ("gpu_p0", "InsideGroup") in everything
    # Corollary B.4: Parallel(e) only over reduction levels
    assert ("gpu_p0", "Parallel(root)") in kept and ("node_p1", "Parallel(gpu_p0)") not in kept
    # Lemma B.6: Master(e) needs every level below e to be a reduction level
    assert not any(f.startswith("Master") for _, f in kept)
