"""Exclusive locks in the workspace."""

from __future__ import annotations

import pytest

from dpsynth.privacy.workspace import LockBusy, exclusive_lock


def test_lock_is_exclusive_and_released(tmp_path):
    path = tmp_path / "names" / "x.lock"
    with exclusive_lock(path):
        with pytest.raises(LockBusy):
            with exclusive_lock(path):
                pass
    with exclusive_lock(path):  # free again once the holder left
        pass
    assert path.exists()  # never deleted
