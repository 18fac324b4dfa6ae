"""Job files for the job-level and group-level blocks of the jobspec tests: two groups, the
first one taking a block of its own, each problem on a known line."""

from __future__ import annotations


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
