"""How a path a person typed is expanded: on the command line and in the policy file alike.

`~`, `~user` and `$HOME` / `${HOME}` are expanded once; nothing else is (a client's JSON `args`
and a TOML string pass them literally: no shell expanded them).
"""

from __future__ import annotations

import os
import re

from .errors import ConfigError

_HOME_VAR = re.compile(r"\$(?:HOME\b|\{HOME\})")


def expand_path(text: str) -> str:
    """`~`, `~user` and `$HOME` / `${HOME}` expanded (a client's JSON `args` pass them
    literally; no shell expanded them), in one pass: what HOME holds is not expanded again.
    Other variables are left as they are. A HOME that is empty or relative is refused."""
    if not (text.startswith("~") or _HOME_VAR.search(text)):
        return text
    home = os.environ.get("HOME")
    if home is None:  # unset: the user database's home, as a shell takes it
        home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise ConfigError(f"{text}: HOME is {home!r}, not an absolute path: give the full path")
    expanded = os.path.expanduser(text) if text.startswith("~") else text
    if expanded.startswith("~"):  # ~user of an unknown user: as the shell leaves it
        return expanded
    return _HOME_VAR.sub(lambda _: home, expanded)
