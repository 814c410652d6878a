"""The published release folder: written whole or not at all, never overwritten.

Files are copied into a hidden temporary folder beside the target, flushed to disk,
hashed into ``manifest.json``, and the folder is renamed into place in one step. A
crash at any point leaves at most a hidden ``.NAME.partial-*`` folder, which is
never read as a release. Large files may be *moved* in instead of copied (same
filesystem): a failure moves them back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import platform
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

# One file hash for the whole package (defined with the input reader, used for manifests).
from ..rows.encoding import file_sha256 as sha256_file

__all__ = ["fsync_path", "publish_release", "package_versions", "sha256_file", "manifest_signature",
           "read_sign_key", "PublishError", "MANIFEST", "SIGNATURE"]

MANIFEST = "manifest.json"
#: HMAC-SHA256 of manifest.json under the publisher's key (optional; see docs/verify.md).
SIGNATURE = "manifest.sig"


def manifest_signature(manifest_text: str, key: bytes) -> str:
    """``hmac-sha256:<hex>`` of the manifest's text under the publisher's key."""
    return "hmac-sha256:" + hmac.new(key, manifest_text.encode("utf-8"), hashlib.sha256).hexdigest()


def read_sign_key(path: str | Path) -> bytes:
    """The publisher's signing key (a secret of at least 16 bytes, kept apart from releases)."""
    from ..privacy.rng import read_secret_file

    return read_secret_file(path, "--sign-key", "a signing key")


_PACKAGES = ("dpsynth", "numpy", "pandas", "pyarrow", "scipy", "prefect", "great_expectations", "cvxpy")


class PublishError(RuntimeError):
    """A release folder that cannot be published (e.g. it exists already)."""

    pass


def code_version() -> str:
    """dpsynth's version, plus the git commit when running from a checkout."""
    from .. import __version__

    root = Path(__file__).resolve().parents[1]
    if (root / ".git").exists():
        import subprocess

        try:
            commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                                    capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
        if commit:
            return f"{__version__}+g{commit}"
    return __version__


def package_versions() -> dict[str, str]:
    """Python's and the key packages' versions, for the manifest."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def fsync_path(path: Path) -> None:
    """Flushes a file, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reader_modes() -> tuple[int, int]:
    """(folder mode, file mode) of published files: 0777/0666 under the caller's umask
    (the one outside the private workspace's 0o077: :func:`dpsynth.privacy.workspace.caller_umask`)."""
    from ..privacy.workspace import caller_umask

    um = caller_umask()
    return 0o777 & ~um, 0o666 & ~um


def _mkdir_for_readers(out: Path) -> None:
    """Creates ``out`` (and missing parents) with reader modes, whatever the current umask."""
    missing = []
    p = out.absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    out.mkdir(parents=True, exist_ok=True)
    folder_mode, _ = _reader_modes()
    for d in missing:
        os.chmod(d, folder_mode)


def _for_readers(root: Path) -> None:
    """A release is for readers: every folder and file under ``root`` gets reader modes."""
    folder_mode, file_mode = _reader_modes()
    os.chmod(root, folder_mode)
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(folder, d), folder_mode)
        for f in files:
            os.chmod(os.path.join(folder, f), file_mode)


def _before_rename(tmp: Path) -> None:
    """Test hook: a point where a crash must leave no release behind."""


def _flush_and_hash(path: Path) -> str:
    fsync_path(path)
    return sha256_file(path)


def _flushed_hashes(root: Path, names: list[str]) -> dict[str, str]:
    """Each file flushed to disk and hashed, on a few threads (sha256 and fsync release the
    GIL: the large synthetic CSV and Parquet files are hashed side by side)."""
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        return dict(zip(names, pool.map(_flush_and_hash, [root / n for n in names])))


def _same_filesystem(src: Path, folder: Path) -> bool:
    return os.stat(src).st_dev == os.stat(folder).st_dev


def _move_back(moved: list[tuple[Path, Path]]) -> None:
    """Returns moved files to where they came from (a failed publish leaves them as found)."""
    for src, dst in reversed(moved):
        if dst.exists() and not src.exists():
            os.rename(dst, src)


def publish_release(
    out: Path,
    name: str,
    files: Mapping[str, Path],
    manifest: Mapping[str, Any],
    extra: Mapping[str, Callable[[Mapping[str, Any]], str]] | None = None,
    sign_key: bytes | None = None,
    move: Collection[str] = (),
) -> Path:
    """Copies ``files`` (bundle name -> file or folder) and a manifest into ``out/name`` atomically.

    ``extra`` maps a bundle name to a function that renders a text file from the
    manifest (without its file list), e.g. the HTML report; those files are hashed too.
    The files named in ``move`` are moved (renamed) rather than copied when they are on
    ``out``'s filesystem, so a large table never exists twice on disk; they get the same
    reader modes as copies. If publishing fails they are moved back (a crash in between
    leaves them in the hidden partial folder: the caller must not rely on them then).
    """
    t0 = time.perf_counter()
    _mkdir_for_readers(out)
    target = out / name
    if target.exists():
        raise PublishError(f"release {target} already exists: releases are never overwritten; pass another --name")
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=f".{name}.partial-"))
    moved: list[tuple[Path, Path]] = []
    try:
        copied: list[str] = []
        for rel, src in sorted(files.items()):
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if Path(src).is_dir():
                shutil.copytree(src, dst)
                copied += [p.relative_to(tmp).as_posix() for p in sorted(dst.rglob("*")) if p.is_file()]
            else:
                if rel in move and _same_filesystem(Path(src), dst.parent):
                    os.rename(src, dst)
                    moved.append((Path(src), dst))
                else:
                    shutil.copyfile(src, dst)
                copied.append(rel)
        full = dict(manifest)
        full["versions"] = package_versions()
        full["code_version"] = code_version()
        for rel, render in (extra or {}).items():
            (tmp / rel).write_text(render(full), encoding="utf-8")
            copied.append(rel)
        hashes = _flushed_hashes(tmp, sorted(copied))
        full["files"] = hashes
        timings = dict(full.get("timings", {}))
        timings["publish"] = round(time.perf_counter() - t0, 6)
        full["timings"] = timings
        text = json.dumps(full, indent=2, sort_keys=True) + "\n"
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if sign_key is not None:
            (tmp / SIGNATURE).write_text(manifest_signature(text, sign_key) + "\n")
            fsync_path(tmp / SIGNATURE)
        _for_readers(tmp)  # mkdtemp, the private umask and copies from the workspace make it private
        fsync_path(tmp)
        _before_rename(tmp)
        if target.exists():
            raise PublishError(f"release {target} already exists: releases are never overwritten; pass another --name")
        os.rename(tmp, target)
        fsync_path(out)
    except BaseException:
        try:
            _move_back(moved)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
