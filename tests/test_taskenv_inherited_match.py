"""`inherited_env` matches names exactly as `fnmatchcase` against each allowed pattern would
(it compiles the allow-list into one regex: every task start filters the agent's environment)."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from yurt.runtime.client.taskenv import DEFAULT_ENV_ALLOW, PRIVATE_ENV, inherited_env

NAMES = ["PATH", "PATHX", "XPATH", "LC_ALL", "LC_", "LC", "lc_all", "TZ", "TERM", "A*", "A?B",
         "[x]", "x", "a\nb", "LC_\n", "YURT_TOKEN", "", "HOME", "S", "ZZ", "!a", "-"]
ALLOWS = [DEFAULT_ENV_ALLOW, (), ("*",), ("PATH", "LC_*"), ("[A-Z]*", "?Z", "*[!a]"),
          ("a\nb", "X*"), ("[", "[]", "A[*]"), ("LC_?", "*_TOKEN")]


@pytest.mark.parametrize("allow", ALLOWS)
def test_the_same_names_pass_as_with_fnmatchcase(allow: tuple[str, ...]) -> None:
    environ = {name: f"value of {name}" for name in NAMES}
    expected = {k: v for k, v in environ.items()
                if k not in PRIVATE_ENV and any(fnmatchcase(k, p) for p in allow)}
    assert inherited_env(environ, allow) == expected
