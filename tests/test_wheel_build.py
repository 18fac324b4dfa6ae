"""The wheel a `pip install` builds (layer 2: a real build by pip and setuptools).

setup.py lists every package, the UI's data-only asset folders included, so the build says
nothing about package discovery (setuptools' forty-line "Package would be ignored" notice
per folder, which the first `./scripts/demo` printed) and still ships every asset and script
the code reads at run time. scripts/smoke_install installs the wheel and runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def tracked(*paths: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *paths], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()


def test_the_wheel_builds_quietly_with_every_file_the_code_reads(tmp_path: Path) -> None:
    # A copy of the tracked sources: a build in the checkout would leave build/ behind.
    source = tmp_path / "source"
    for name in tracked("setup.py", "pyproject.toml", "README.md", "runtime", "hooks",
                        "store"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "BuildBackendWarning" not in output, output
    assert "would be ignored" not in output, output
    (wheel,) = (tmp_path / "dist").glob("yurt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = [f for f in tracked("runtime/ui/assets", "runtime/client/drivers")
               if f.endswith((".js", ".css", ".html", ".svg", ".sh"))]
    assert any(f.endswith("pages/jobs.js") for f in shipped)  # the listing found them
    missing = [f for f in shipped if f"yurt/{f}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    for top in ("runtime", "hooks", "store"):
        assert f"yurt/{top}/py.typed" in names
