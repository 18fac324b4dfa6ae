"""Job files for the job-level and group-level blocks of the jobspec tests (two groups, the
first one taking a block of its own, each problem on a known line), and the problems a file
gives."""

from __future__ import annotations

import pytest

from yurt.runtime.errors import JobSpecError, SpecProblem
from yurt.runtime.jobspec import parse_job


def hcl(job_type: str = "service", job_block: str = "", group_block: str = "") -> str:
    """A job whose line 3 holds `job_block` and line 5 `group_block` (one line each)."""
    return f'''job "web" {{
  type = "{job_type}"
  {job_block}
  group "api" {{
    {group_block}
    task "t" {{
      driver = "mock_driver"
    }}
  }}
  group "other" {{
    task "t" {{
      driver = "mock_driver"
    }}
  }}
}}
'''


def problems_of(text: str, filename: str = "job.nomad.hcl") -> list[SpecProblem]:
    """The problems `text` gives as a job file (it must give some)."""
    with pytest.raises(JobSpecError) as info:
        parse_job(text, filename=filename)
    return info.value.problems
