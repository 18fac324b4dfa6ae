"""Install the three top-level folders under one import namespace.

The repository's layout (`runtime/`, `hooks/`, `store/` at the top) is fixed, but those names are
taken on PyPI, so the wheel maps them to `yurt.runtime`, `yurt.hooks` and `yurt.store`. pyproject
metadata cannot compute the sub-package list of a remapped folder, hence this file; everything
else lives in pyproject.toml. Non-Python files the code reads at run time (the raw_exec shim,
`py.typed`, the web UI's assets) are listed in `package_data` so a plain `pip install` has them.

The UI's asset folders hold no Python, yet a folder is importable all the same (a namespace
package), so setuptools warns ("Package would be ignored", forty lines each) about any such
folder that `packages` leaves out, even when another package's data globs reach its files.
They are listed as packages of their own, each with its data, so a build says nothing.
"""

from setuptools import find_packages, setup

TOP_LEVEL = ("runtime", "hooks", "store")

package_dir = {f"yurt.{top}": top for top in TOP_LEVEL}
#: Folders of data only, as packages: their files, by glob (nothing else lives there).
DATA_PACKAGES = {
    "yurt.runtime.ui.assets": ["*.*"],
    "yurt.runtime.ui.assets.pages": ["*.js"],
}

packages = [
    name
    for top in TOP_LEVEL
    for name in (f"yurt.{top}", *(f"yurt.{top}.{sub}" for sub in find_packages(top)))
] + list(DATA_PACKAGES)

setup(
    package_dir=package_dir,
    packages=packages,
    package_data={"": ["*.sh", "py.typed"], **DATA_PACKAGES},
)
