"""Where results are kept: one SQLite file (WAL), shared by processes and sessions."""

from __future__ import annotations

import os
from pathlib import Path

from . import _core


def default_db_path() -> Path:
    """``DR_KERNEL_DB`` when set, else ``results.db`` in the per-user cache folder."""
    explicit = os.environ.get("DR_KERNEL_DB")
    if explicit:
        return Path(explicit).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "dr_kernel" / "results.db"


def open_store(path: str | os.PathLike | None = None, read_only: bool = False) -> _core.Store:
    """Opens (creating it and its folder when missing) the results store. ``read_only`` opens an
    existing store only to read it: nothing is created or changed, and a store that cannot be
    written is fine (a missing one is an error)."""
    db = Path(path) if path is not None else default_db_path()
    if not read_only:
        blocker = next((p for p in (db.parent, *db.parent.parents) if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ValueError(f"{blocker} is a file, not a folder, so the results store {db} cannot be made "
                             "under it; give a path whose folders are folders")
        db.parent.mkdir(parents=True, exist_ok=True)
    return _core.Store(str(db), read_only)
