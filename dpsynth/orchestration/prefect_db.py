"""The temporary Prefect server's SQLite database, ready without replaying Prefect's migrations.

A Prefect server checks its database at every start (``alembic upgrade head``: 1.5 s on an
idle core even when nothing is to do) and, in a new ``PREFECT_HOME``, creates it by running
every migration (5-9 s). Here, once per Prefect version, the database a temporary server has
just created (migrated, block types registered, no run yet) is copied to the user's cache;
a new ``PREFECT_HOME`` then starts from a copy of it, and a database already at that
template's Alembic revision is started without the check. Everything else is left as
Prefect does it: a database setting anywhere in Prefect's settings sources, a database at
another revision, or no template yet. ``python -m dpsynth.orchestration.prefect_db``
builds the template ahead (``make install`` does), so that even a first release has it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["DatabasePlan", "alembic_revision", "build_template", "default_database", "plan_database",
           "save_template", "template_path"]

# A setting that may move Prefect's database: in env-style files (profiles, .env) a PREFECT_
# variable naming DATABASE or HOME; in TOML files (prefect.toml, [tool.prefect]) a database
# table or key, or a `home` key.
_ENV_STYLE = re.compile(r"PREFECT_\w*(DATABASE|HOME)", re.IGNORECASE)
_TOML_STYLE = re.compile(r"database|^\s*home\s*=", re.IGNORECASE | re.MULTILINE)


def _prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def _settings_files(home: Path) -> list[Path]:
    """Where Prefect reads settings besides the environment (profiles, prefect.toml, .env,
    pyproject.toml of the working folder)."""
    profiles = os.environ.get("PREFECT_PROFILES_PATH")
    cwd = Path.cwd()
    return [Path(profiles).expanduser() if profiles else home / "profiles.toml",
            cwd / "prefect.toml", cwd / ".env", cwd / "pyproject.toml"]


def default_database() -> Path | None:
    """Prefect's default SQLite file (``$PREFECT_HOME/prefect.db``) when nothing may set
    another database; None when a ``PREFECT_*DATABASE*`` variable or a settings file naming a
    database or a home may (read as text: importing Prefect's settings costs 1-2 s)."""
    if any("DATABASE" in k for k in os.environ if k.startswith("PREFECT_")):
        return None
    home = _prefect_home()
    for f in _settings_files(home):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = f.read_text() if f.is_file() else ""
            if f.name == "pyproject.toml" and "tool.prefect" not in text:
                continue
            if (_TOML_STYLE if f.suffix == ".toml" and f.name != "profiles.toml" else _ENV_STYLE).search(text):
                return None
    return home / "prefect.db"


def template_path() -> Path | None:
    """The migrated template for the installed Prefect version, in the user's cache
    (``$XDG_CACHE_HOME/dpsynth/prefect-db/<version>/prefect.db``); None without Prefect."""
    try:
        version = metadata.version("prefect")
    except metadata.PackageNotFoundError:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return cache / "dpsynth" / "prefect-db" / re.sub(r"[^A-Za-z0-9._+-]", "_", version) / "prefect.db"


def alembic_revision(database: Path) -> str | None:
    """The Alembic revision a SQLite database is at, or None (no file, not a Prefect database)."""
    if not database.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as con:
            rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


@dataclass(frozen=True)
class DatabasePlan:
    """How the temporary server starts: ``migrate`` (Prefect's check at start-up), ``seeded``
    (the database was copied from the template now) and ``save_to`` (where to keep a template
    once the server has created a new database; None when one exists or is not wanted)."""

    migrate: bool
    seeded: bool = False
    save_to: Path | None = None
    database: Path | None = None


def plan_database() -> DatabasePlan:
    """Prepares the temporary server's database before its launch (see the module's text)."""
    database, template = default_database(), template_path()
    if database is None or template is None:
        return DatabasePlan(migrate=True)
    head = alembic_revision(template)
    if head is None:
        return DatabasePlan(migrate=True, save_to=None if database.exists() else template, database=database)
    seeded = not database.exists() and _copy_new(template, database)
    return DatabasePlan(migrate=alembic_revision(database) != head, seeded=seeded, database=database)


def _copy_new(source: Path, target: Path) -> bool:
    """Copies ``source`` (a SQLite database) to ``target`` if ``target`` does not exist, as
    one atomic step (another process may create it meanwhile: theirs is kept)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".prefect-db-", dir=target.parent)
    os.close(fd)
    try:
        _backup(source, Path(tmp))
        os.link(tmp, target)  # fails if the file appeared meanwhile
        return True
    except (OSError, sqlite3.Error):
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _backup(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (also while a server has it open in WAL mode)."""
    with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=10)) as src, \
            contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")  # one file (Prefect sets WAL again when it opens it)


def _has_runs(database: Path) -> bool:
    """Whether a Prefect database holds any flow run, task run or log (or cannot be read)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as con:
            return any(con.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in ("flow_run", "task_run", "log"))
    except sqlite3.Error:
        return True


def save_template(plan: DatabasePlan) -> bool:
    """After the server answers (its start-up created and migrated the database; no run
    yet), keeps a copy as the template for the next new ``PREFECT_HOME``; never raises.
    A database that already holds a run (another command's server on the same new home
    got there first) is not kept."""
    if plan.save_to is None or plan.database is None or alembic_revision(plan.database) is None:
        return False
    if _has_runs(plan.database):
        return False
    try:
        plan.save_to.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".prefect-db-", dir=plan.save_to.parent)
        os.close(fd)
        try:
            _backup(plan.database, Path(tmp))
            os.replace(tmp, plan.save_to)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except (OSError, sqlite3.Error):
        return False
    return True


_MIGRATE = "import asyncio; from prefect.server.database import provide_database_interface as p; asyncio.run(p().create_db())"


def build_template(timeout: float = 600.0) -> Path | None:
    """The template for the installed Prefect version, built now if missing by Prefect's own
    migrations (``create_db``) in an isolated ``PREFECT_HOME``; None without Prefect."""
    template = template_path()
    if template is None or alembic_revision(template) is not None:
        return template
    template.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=template.parent) as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=home, PREFECT_PROFILES_PATH=str(Path(home) / "profiles.toml"),
                   PREFECT_SERVER_ANALYTICS_ENABLED="false")
        subprocess.run([sys.executable, "-c", _MIGRATE], env=env, cwd=home, check=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        save_template(DatabasePlan(migrate=True, save_to=template, database=Path(home) / "prefect.db"))
    return template if alembic_revision(template) is not None else None


if __name__ == "__main__":
    built = build_template()
    print(f"Prefect database template: {built or 'not built (Prefect is not installed)'}")
