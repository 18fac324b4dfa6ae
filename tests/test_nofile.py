"""The descriptor limit: raised at agent start, and reported as what it allows (layer 2: the
limit is lowered in a child process, never in the test runner)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (256, int(sys.argv[2])))
from yurt.runtime.client.fingerprint import fingerprint_node, raise_nofile_limit
nofile = raise_nofile_limit()
node = fingerprint_node(Path(sys.argv[1]), nofile=nofile)
print(json.dumps({"soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                  "nofile": node.attributes["yurt.nofile"],
                  "max_tasks": node.attributes["yurt.max_tasks"]}))
'''


def run_child(data_dir: Path, hard: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(data_dir), str(hard)],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_soft_limit_is_raised_to_the_hard_one_and_reported(tmp_path: Path) -> None:
    got = run_child(tmp_path, 4096)
    assert got["soft"] == 4096
    assert got["nofile"] == "4096"
    # (4096 - 128 reserved) // 6 per task
    assert got["max_tasks"] == "661"
