"""Workspace secret and exclusive locks."""

from __future__ import annotations

import stat

import pytest

from dpsynth.workspace import LockBusy, exclusive_lock, workspace_secret


def test_secret_is_created_once_private_and_stable(tmp_path):
    a = workspace_secret(tmp_path / "ws")
    assert len(a) == 32 and workspace_secret(tmp_path / "ws") == a
    assert stat.S_IMODE((tmp_path / "ws" / "secret.key").stat().st_mode) == 0o600
    assert workspace_secret(tmp_path / "other") != a
    assert [p.name for p in (tmp_path / "ws").iterdir()] == ["secret.key"]  # no temporary left


def test_damaged_secret_is_refused(tmp_path):
    (tmp_path / "secret.key").write_bytes(b"short")
    with pytest.raises(RuntimeError, match="damaged"):
        workspace_secret(tmp_path)


def test_lock_is_exclusive_and_released(tmp_path):
    path = tmp_path / "names" / "x.lock"
    with exclusive_lock(path):
        with pytest.raises(LockBusy):
            with exclusive_lock(path):
                pass
    with exclusive_lock(path):  # free again once the holder left
        pass
    assert path.exists()  # never deleted
