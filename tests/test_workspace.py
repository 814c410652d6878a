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


# --- issue 23, section 2: one workspace per user -------------------------------------------


def test_tests_never_use_the_real_home():
    """conftest points the default workspace into a temporary folder for the session."""
    import os
    from pathlib import Path

    from dpsynth.privacy.workspace import default_workspace

    home = Path.home()
    assert os.environ["DPSYNTH_WORKSPACE"] and home not in default_workspace().parents
    assert home not in Path(os.environ["XDG_DATA_HOME"]).parents


def test_default_workspace_is_the_users_data_folder(monkeypatch, tmp_path):
    """One workspace per user, whatever the current folder: $DPSYNTH_WORKSPACE, else
    $XDG_DATA_HOME (absolute) or ~/.local/share on Linux, ~/Library/Application Support on macOS."""
    from pathlib import Path

    from dpsynth.privacy import workspace
    from dpsynth.pipeline import ReleaseConfig

    monkeypatch.delenv("DPSYNTH_WORKSPACE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(workspace.sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert workspace.default_workspace() == tmp_path / "xdg" / "dpsynth" / "workspace"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    assert workspace.default_workspace() == tmp_path / "home" / ".local" / "share" / "dpsynth" / "workspace"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert workspace.default_workspace() == tmp_path / "home" / ".local" / "share" / "dpsynth" / "workspace"
    monkeypatch.chdir(tmp_path)  # the current folder plays no part
    cfg = ReleaseConfig(data=Path("d.csv"), schema=Path("s.yaml"), method="marginals", epsilon=1.0, out=Path("o"))
    assert cfg.workspace == tmp_path / "home" / ".local" / "share" / "dpsynth" / "workspace"
    monkeypatch.setattr(workspace.sys, "platform", "darwin")
    assert workspace.default_workspace() == (tmp_path / "home" / "Library" / "Application Support" / "dpsynth"
                                             / "workspace")
    monkeypatch.setenv("DPSYNTH_WORKSPACE", str(tmp_path / "mine"))
    assert workspace.default_workspace() == tmp_path / "mine"


def test_budget_commands_use_and_name_the_default_registry(monkeypatch, tmp_path, capsys):
    """`dpsynth budget` without --workspace reads the user's registry and says which (stderr)."""
    from dpsynth.cli import main

    monkeypatch.delenv("DPSYNTH_WORKSPACE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert main(["budget", "set", "people", "--epsilon", "2", "--delta", "1e-6"]) == 0
    expected = tmp_path / "xdg" / "dpsynth" / "workspace" / "registry.sqlite"
    err = capsys.readouterr().err
    assert expected.is_file() and f"privacy registry {expected}" in err
    assert not (tmp_path / ".dpsynth").exists()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["budget", "show", "people"]) == 0  # another folder, the same registry
    assert "cap epsilon 2" in capsys.readouterr().out


def test_private_workspace_restores_the_umask_and_nests(tmp_path):
    import os
    import stat

    from dpsynth.privacy.workspace import caller_umask, private_workspace

    old = os.umask(0o022)
    try:
        with private_workspace(tmp_path / "a" / "ws") as ws:
            with private_workspace(ws):
                (ws / "f").write_text("x")
                assert caller_umask() == 0o022
            (ws / "g").write_text("x")  # still private after the inner block
        (tmp_path / "h").write_text("x")
        assert stat.S_IMODE((ws / "f").stat().st_mode) == 0o600 == stat.S_IMODE((ws / "g").stat().st_mode)
        assert stat.S_IMODE(ws.stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "h").stat().st_mode) == 0o644
    finally:
        os.umask(old)
