"""tools/schedule.py, the queue of tools/test: its table (tools/test-jobs) read and refused when
wrong, and each rule of pick() (needs, groups, alone, first, longest first, the reservation for a
job that runs alone), then the whole suite simulated over the real table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("schedule", REPO / "tools" / "schedule.py")
assert _spec is not None and _spec.loader is not None
schedule = importlib.util.module_from_spec(_spec)
sys.modules["schedule"] = schedule  # dataclasses look the module up by name
_spec.loader.exec_module(schedule)


def table(text: str) -> schedule.Table:
    return schedule.parse_table(text, "test")


SMALL = table(
    """
    # job  seconds group needs when
    lint      40  -     -     first
    pytest   180  -     -     first
    image    250  -     -     -
    cluster  480  wheel image alone
    fleet    600  wheel -     -
    smoke    300  wheel -     -
    edge     650  -     -     -
    gfx      100  -     -     -
    """
)


# -- the table -------------------------------------------------------------------------------------
def test_the_real_table_lists_every_scenario():
    real = schedule.load_table()
    scenarios = {p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")}
    assert scenarios <= set(real.jobs), scenarios - set(real.jobs)
    assert {"lint", "pytest", "converged_image"} <= set(real.jobs)
    # The wheel is built in a temporary directory: nothing keeps the scenarios that build it apart.
    assert {j.group for j in real.jobs.values()} == {None}
    assert real.get("cluster").needs == ("converged_image",)
    assert real.get("cluster").alone


@pytest.mark.parametrize(
    "text, message",
    [
        ("a 10 - -", "4 column(s)"),
        ("a ten - - -", "seconds 'ten' of a is not a number >= 0"),
        ("a -5 - - -", "seconds '-5' of a is not a number >= 0"),
        ("a 10 - - maybe", "last column 'maybe' of a; want 'alone', 'first' or '-'"),
        ("a 10 - - -\na 20 - - -", "a is listed twice"),
        ("a 10 - b -", "a needs b, which is not listed"),
        ("a 10 - b -\nb 10 - a -", "the needs go round: a -> b -> a"),
    ],
)
def test_a_wrong_table_is_refused_naming_the_row(text, message):
    with pytest.raises(schedule.TableError, match=r"^test") as err:
        table(text)
    assert message in str(err.value)


def test_needs_are_added_first_and_once():
    assert schedule.with_needs(["cluster", "gfx"], SMALL) == ["image", "cluster", "gfx"]
    assert schedule.with_needs(["image", "cluster", "cluster"], SMALL) == ["image", "cluster"]
    assert schedule.with_needs(["new_scenario"], SMALL) == ["new_scenario"]


# -- pick() ----------------------------------------------------------------------------------------
def pick(pending, running=None, done=(), workers=2, tab=SMALL, estimate=None):
    return schedule.pick(list(pending), dict(running or {}), set(done), workers, tab, estimate)


def test_the_job_marked_alone_and_its_needs_go_first_then_first_then_longest():
    jobs = list(SMALL.jobs)
    assert schedule.order(jobs, SMALL) == [
        "image", "cluster", "pytest", "lint", "edge", "fleet", "smoke", "gfx",
    ]  # fmt: skip
    without = [j for j in jobs if j not in ("cluster", "image")]
    assert schedule.order(without, SMALL) == ["pytest", "lint", "edge", "fleet", "smoke", "gfx"]
    # A job's length counts the jobs that wait for it.
    chain = table("a 100 - - -\nb 300 - - -\nc 250 - a -")
    assert schedule.order(["a", "b", "c"], chain) == ["a", "b", "c"]  # 350, 300, 250


def test_a_job_waits_for_its_needs():
    assert pick(["cluster", "image"]) == "image"
    assert pick(["cluster"], running={"image": 10}, workers=3) is None
    assert pick(["cluster"], done={"image"}) == "cluster"


def test_no_two_jobs_of_one_group_run_at_once():
    assert pick(["fleet", "smoke", "gfx"], running={"smoke": 0}) == "gfx"
    assert pick(["fleet", "smoke"], running={"smoke": 0}) is None
    assert pick(["fleet", "smoke"], running={"edge": 0}) == "fleet"


def test_a_job_marked_alone_runs_with_nothing_beside_it():
    assert pick(["gfx"], running={"cluster": 0}, done={"image"}, workers=4) is None
    # Ready, but a job still runs: it waits, and so does every job longer than that one's rest.
    assert pick(["cluster", "edge", "gfx"], running={"smoke": 100}, done={"image"}) == "gfx"
    assert pick(["cluster", "edge", "gfx"], running={"smoke": 250}, done={"image"}) is None
    assert pick(["cluster", "gfx"], done={"image"}) == "cluster"


def test_while_the_alone_job_waits_for_its_need_only_what_ends_before_starts():
    pending = ["cluster", "pytest", "lint", "edge", "gfx"]
    assert pick(pending, running={"image": 0}) == "pytest"  # 180 <= 250, first
    assert pick(["cluster", "lint", "edge", "gfx"], running={"image": 180}) == "lint"  # 40 <= 70
    assert pick(["cluster", "edge", "gfx"], running={"image": 220}) is None  # 100 > 30
    # The estimate of a reused image: nothing fits beside it.
    assert pick(pending, running={"image": 0}, estimate={"image": 0}) is None
    # A job marked first starts while its image is expected to run (pytest: 180 > 70 left), or
    # while another job marked first runs; any other job only if it ends in time.
    assert pick(["cluster", "pytest", "edge"], running={"image": 180}) == "pytest"
    assert pick(["cluster", "lint", "gfx"], running={"pytest": 170}, done={"image"}) == "lint"
    assert pick(["cluster", "gfx"], running={"pytest": 170}, done={"image"}) is None
    assert pick(["cluster", "gfx"], running={"pytest": 50}, done={"image"}) == "gfx"


def test_workers_and_unknown_jobs():
    assert pick(["gfx"], running={"edge": 0}, workers=1) is None
    assert pick(["gfx", "edge"], workers=1) == "edge"
    # A job the table does not know counts as 600 s, longest first among the others.
    assert pick(["gfx", "new_scenario"], tab=SMALL) == "new_scenario"


# -- the whole suite -------------------------------------------------------------------------------
def test_the_simulated_suite_keeps_every_rule():
    real = schedule.load_table()
    jobs = list(real.jobs)
    total, timeline = schedule.simulate(jobs, real, workers=2)
    assert sorted(name for name, _, _ in timeline) == sorted(jobs)
    spans = {name: (start, end) for name, start, end in timeline}

    def overlap(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    for a in jobs:
        for b in jobs:
            if a < b and real.get(a).group and real.get(a).group == real.get(b).group:
                assert not overlap(a, b), (a, b)
            if a != b and real.get(a).alone:
                assert not overlap(a, b), (a, b)
        for need in real.get(a).needs:
            assert spans[need][1] <= spans[a][0], (need, a)
    # At no time more than two jobs; lint and pytest start before any scenario but cluster's image.
    for _, start, _ in timeline:
        assert sum(s <= start < e for s, e in spans.values()) <= 2
    scenarios = [n for n in jobs if n not in ("lint", "pytest", "converged_image")]
    assert max(spans["lint"][0], spans["pytest"][0]) <= min(spans[n][0] for n in scenarios)
    # cluster starts as soon as its image is built and the lint and pytest have ended.
    assert spans["cluster"][0] == max(spans[n][1] for n in ("converged_image", "lint", "pytest"))
    # A reused image (estimate 0): cluster at once, nothing beside it.
    _, reused = schedule.simulate(jobs, real, workers=2, estimate={"converged_image": 0})
    assert [(n, s) for n, s, _ in reused[:2]] == [("converged_image", 0), ("cluster", 0)]
    # Two workers do better than the sum of every job on one.
    one, _ = schedule.simulate(jobs, real, workers=1)
    assert one == sum(real.get(n).seconds for n in jobs)
    assert total < one * 0.65


def test_the_command_line_tools_test_calls():
    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(REPO / "tools" / "schedule.py"), *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    assert run("plan", "cluster", "lint").split() == ["converged_image", "cluster", "lint"]
    assert run("needs", "cluster").split() == ["converged_image"]
    assert run("needs", "lint") == ""
    assert run("seconds", "new_scenario") == "600\n"
    out = run("next", "--pending", "cluster converged_image lint", "--running", "", "--done", "")
    assert out == "converged_image\n"
    out = run(
        "next", "--pending", "cluster lint default", "--running", "converged_image=10",
        "--done", "", "--estimate", "converged_image=0",
    )  # fmt: skip
    assert out == ""  # the reused image: cluster goes next, nothing beside it
    bad = subprocess.run(
        [sys.executable, str(REPO / "tools" / "schedule.py"), "next", "--running", "lint"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "--running 'lint': want JOB=SECONDS" in bad.stderr
