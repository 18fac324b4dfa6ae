"""The task's `template` block: Nomad's `Template`, `ChangeScript` and `WaitConfig`, with the
defaults `api/tasks.go` canonicalises to (change_mode restart, splay 5s, perms 0644, `{{ }}`
delimiters, a script timeout of 5s, SIGHUP for a signal template that names no signal).

Python attribute names are the HCL names; JSON names are Nomad's (`SourcePath`, `DestPath`,
`EmbeddedTmpl`, `Envvars`, `ErrMissingKey`, `LeftDelim`, ...), so `nomad job run -output` JSON
and HCL give the same struct.
"""

from __future__ import annotations

from typing import Final

from msgspec import field

from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs.base import Base, Duration

TEMPLATE_CHANGE_MODES: Final = ("noop", "signal", "script", "restart")


class ChangeScript(Base):
    command: str = ""
    args: list[str] = field(default_factory=list)
    timeout: Duration = 5 * SECOND
    fail_on_error: bool = False
    run_on_first_render: bool = False


class WaitConfig(Base):
    """`wait { min max }`: quiesce re-renders (None = not set, as Nomad's pointers)."""

    min: Duration | None = None
    max: Duration | None = None


class Template(Base):
    source: str = field(default="", name="SourcePath")
    destination: str = field(default="", name="DestPath")
    data: str = field(default="", name="EmbeddedTmpl")
    change_mode: str = "restart"
    change_signal: str = ""
    change_script: ChangeScript | None = None
    once: bool = False
    splay: Duration = 5 * SECOND
    perms: str = "0644"
    uid: int | None = None
    gid: int | None = None
    left_delimiter: str = field(default="{{", name="LeftDelim")
    right_delimiter: str = field(default="}}", name="RightDelim")
    env: bool = field(default=False, name="Envvars")
    vault_grace: Duration = 0
    wait: WaitConfig | None = None
    error_on_missing_key: bool = field(default=False, name="ErrMissingKey")

    def __post_init__(self) -> None:
        # api/tasks.go Canonicalize: a signal template without a signal sends SIGHUP, and
        # signal names are upper case.
        if not self.change_signal and self.change_mode == "signal":
            self.change_signal = "SIGHUP"
        self.change_signal = self.change_signal.upper()
