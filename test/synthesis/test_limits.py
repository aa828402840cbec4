"""distir-synth finishes or refuses at once (docs/robustness.md): the work of a request
is bounded before it is done (``MAX_DEVICES``, ``MAX_MATRICES``, ``MAX_SIMULATION_WORK``)
or while the enumeration runs (``MAX_SEARCH_WORK``), with a diagnostic naming the limit.
The tests count work (calls, steps), never time."""

import pytest

from distir.dialects.diagnostics import InputRejected
from distir.synthesis import driver, language, simulate
from distir.synthesis.driver import synthesize
from distir.synthesis.matrices import MAX_MATRICES, divisors, parallelism_matrices
from distir.tools.synth import main as synth
from distir.tuning.topology import get_topology


def test_a_hierarchy_of_many_devices_is_refused_before_any_simulation(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(driver, "program_time", lambda *a, **k: calls.append(a) or 0.0)
    assert synth(["--hierarchy", "2,65536", "--axes", "2,65536", "--reduce-axes", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("timing the 6 programs of 2 matrices would simulate 12 collectives on 131,072 devices each")
    assert f"more than the limit of {driver.MAX_SIMULATION_WORK:,} collectives x devices" in err
    assert calls == []


def test_p2s_largest_case_is_far_below_the_simulation_limit():
    result = synthesize((4, 16), (16, 2, 2), (0, 2), get_topology("p2-a100", 4), "ring")
    collectives = sum(len({i for p in m.programs for i in p}) + 1 for m in result.matrices)
    assert collectives * 64 * 20 < driver.MAX_SIMULATION_WORK


def test_absurd_device_counts_are_refused_before_factoring(capsys):
    assert synth(["--hierarchy", "2,1000000000", "--axes", "2,1000000000", "--reduce-axes", "0"]) == 1
    assert capsys.readouterr().err == "the hierarchy 2,1000000000 has 2,000,000,000 devices, more than the 16,777,216 distir-synth takes\n"


def test_divisors_by_trial_division_up_to_the_square_root():
    for n in range(1, 500):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert divisors(16_777_216) == [2**k for k in range(25)]


def test_too_many_parallelism_matrices_are_refused():
    with pytest.raises(InputRejected, match=f"more than {MAX_MATRICES:,} parallelism matrices"):
        parallelism_matrices((2,) * 10, (2,) * 10)
    assert len(parallelism_matrices((2,) * 6, (2,) * 6)) == 720  # 6! placements: under the limit


def test_an_enumeration_over_its_budget_stops_with_a_diagnostic(monkeypatch):
    # 4 levels with size limit 5 try 50,480 steps on 16 devices (800k); a budget of 100k
    # stops it after 6,250 steps
    language._enumerate.cache_clear()
    monkeypatch.setattr(language, "MAX_SEARCH_WORK", 100_000)
    with pytest.raises(InputRejected, match="has too many programs of at most 5 instructions to enumerate") as e:
        synthesize((2, 2, 2, 2), (16,), (0,))
    assert "more than 100,000 steps x devices, the limit" in str(e.value)
    assert "--size-limit" in str(e.value)
    language._enumerate.cache_clear()
    monkeypatch.setattr(language, "MAX_SEARCH_WORK", 1_000_000)
    assert synthesize((2, 2, 2, 2), (16,), (0,)).programs_total == 3046
    language._enumerate.cache_clear()


def test_six_levels_are_refused_by_the_real_budget(capsys):
    # 6 levels of 2 with size limit 5 would try 1.5 million steps on 64 devices (26 s);
    # the search stops at the budget
    language._enumerate.cache_clear()
    assert synth(["--hierarchy", "2,2,2,2,2,2", "--axes", "64", "--reduce-axes", "0", "--topology", "dgx2", "--nodes", "4"]) == 1
    err = capsys.readouterr().err
    assert "has too many programs of at most 5 instructions to enumerate" in err
    assert f"more than {language.MAX_SEARCH_WORK:,} steps x devices, the limit" in err
    language._enumerate.cache_clear()


def test_simulation_visits_only_the_devices_of_the_groups(monkeypatch):
    # the simulator's work is per device (why the limit counts devices): system_groups
    # lists every device of the system once per instruction
    seen = []
    real = simulate.system_groups.__wrapped__
    monkeypatch.setattr(simulate, "system_groups", lambda *a: seen.append(sum(map(len, real(*a)))) or real(*a))
    synthesize((2, 16), (2, 16), (0,), get_topology("p2-a100", 2))
    assert seen and set(seen) == {32}
