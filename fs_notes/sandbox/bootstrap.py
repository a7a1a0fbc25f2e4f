"""How a child Python of layer 3 (a worker, a probe) finds fs-notes' code: by location.

Children run isolated (`python -I -S`: no environment variables, no user or site packages, no
current folder on sys.path). `loader()` is the code they run first: it loads the `fs_notes`
package from the folder this process loaded it from and registers it, so `fs_notes.sandbox.*` and
the rest import through that package's own path. Nothing is added to sys.path: an installed
fs-notes does not put all of site-packages within a worker's reach.
"""

from __future__ import annotations

import os

import fs_notes

_INIT = os.path.abspath(fs_notes.__file__ or "")


def loader() -> str:
    """Python statements that make `import fs_notes...` work in an isolated child."""
    folder = os.path.dirname(_INIT)
    return (
        "import sys, importlib.util as _u; "
        f"_s = _u.spec_from_file_location('fs_notes', {_INIT!r}, "
        f"submodule_search_locations=[{folder!r}]); "
        "_m = _u.module_from_spec(_s); sys.modules['fs_notes'] = _m; _s.loader.exec_module(_m); "
    )


__all__ = ["loader"]
