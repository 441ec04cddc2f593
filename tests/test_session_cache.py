"""The test session's cache root (tests/conftest.py): VAIML's engine choices are the
session's own, so that no choice measured elsewhere (another session, another user of the
cache, another machine load) decides which engine a test runs on; the built models are
shared with the user's cache."""

from __future__ import annotations

import os
from pathlib import Path

from copyless.model.zoo import CACHE_ENV, cache_root


def test_the_cache_root_is_the_sessions(session_cache_root: Path) -> None:
    assert cache_root() == session_cache_root
    assert os.environ[CACHE_ENV] == str(session_cache_root)  # child processes too
    assert not (session_cache_root / "engines").is_symlink()
    for name in ("zoo", "compiled", "photos", "bench"):  # conftest's SHARED_CACHE
        assert (session_cache_root / name).is_symlink()
        assert (session_cache_root / name).resolve() != (session_cache_root / name)
