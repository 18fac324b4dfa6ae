"""The job files of examples/real/ (layer 0): each shaped like a job Nomad users publish (its
header says which pattern), each valid, and a few read as Nomad reads them.

`PENDING` are files that use what other work is adding (HCL2 variables, node_pool, scaling,
host volumes, drivers beyond raw_exec's family); they are expected to fail, strictly, so the
entry must go once the feature lands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from yurt.runtime.jobspec import load_job

REAL: Final = Path(__file__).resolve().parent.parent / "examples" / "real"

#: File name → what it waits for.
PENDING: Final[dict[str, str]] = {}

FILES: Final = sorted(p.name for p in REAL.glob("*.nomad.hcl"))


def test_there_are_real_jobs_and_each_names_its_pattern() -> None:
    assert len(FILES) >= 10
    for name in FILES:
        assert (REAL / name).read_text().startswith("# Shape: "), name


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=PENDING[n], strict=True))
    if n in PENDING else n for n in FILES])
def test_real_job_is_valid(name: str) -> None:
    job = load_job(REAL / name)
    assert job.task_groups
    assert all(g.tasks for g in job.task_groups)


def test_some_real_jobs_mean_what_they_mean_in_nomad() -> None:
    lone = load_job(REAL / "e2e-lone-task.nomad.hcl")
    assert [(g.name, g.tasks[0].name) for g in lone.task_groups] == [("sleep", "sleep")]
    employee = load_job(REAL / "pytechco-employee.nomad.hcl").task_groups[0].tasks[0]
    assert employee.restart_policy is not None
    assert (employee.restart_policy.attempts, employee.restart_policy.mode) == (2, "fail")
    weekly = load_job(REAL / "pytechco-weekly.nomad.hcl").task_groups[0].tasks[0]
    assert (weekly.resources.cpu, weekly.resources.memory) == (100, 64)
    bridged = load_job(REAL / "e2e-bridge-consul.nomad.hcl").task_groups[0]
    assert (bridged.networks[0].mode, bridged.services[0].provider) == ("bridge", "consul")
