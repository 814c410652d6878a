"""The temporary Prefect server's SQLite database, ready without replaying Prefect's migrations.

A Prefect server checks its database at every start (``alembic upgrade head``: 1.5 s on an
idle core even when nothing is to do) and, in a new ``PREFECT_HOME``, creates it by running
every migration (5-9 s). Here a migrated template is kept once per Prefect version in the
user's cache; a new ``PREFECT_HOME`` starts from a copy of it, and a database already at that
template's Alembic revision is started without the check. The template comes from the schema
shipped with dpsynth for the pinned Prefect (``prefect_schema/prefect-<version>.sql``: the
statements Prefect's own migrations leave in ``sqlite_master``, and the Alembic revision), used
only when the installed version and the head of its migration scripts both match; else from
the database a temporary server has just created (migrated, block types registered, no run
yet). Everything else is left as Prefect does it: a database setting anywhere in Prefect's
settings sources, a database at another revision, or no template. ``python -m
dpsynth.orchestration.prefect_db`` builds the template ahead (``make install`` does);
``--write-schema`` regenerates the shipped schema from Prefect's migrations.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["DatabasePlan", "alembic_revision", "build_template", "default_database", "migration_head",
           "plan_database", "save_template", "schema_sql", "shipped_schema", "template_path", "write_schema"]

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
    (the database was copied from the template now), ``save_to`` (where to keep a template
    once the server has created a new database; None when one exists or is not wanted) and
    ``register_blocks`` (Prefect's block registration at start-up: off when the copy already
    holds the block types, :func:`_blocks_in_template`)."""

    migrate: bool
    seeded: bool = False
    save_to: Path | None = None
    database: Path | None = None
    register_blocks: bool = True


def plan_database() -> DatabasePlan:
    """Prepares the temporary server's database before its launch (see the module's text)."""
    database, template = default_database(), template_path()
    if database is None or template is None:
        return DatabasePlan(migrate=True)
    head = alembic_revision(template)
    if head is None and not database.exists() and _template_from_schema(template):
        head = alembic_revision(template)  # an empty cache, filled from the shipped schema
    if head is None:
        return DatabasePlan(migrate=True, save_to=None if database.exists() else template, database=database)
    seeded = not database.exists() and _copy_new(template, database)
    # A template made from the shipped schema has no block types yet: the server registers
    # them at its start (about 1 CPU s); its database, then, is the better template.
    save_to = template if seeded and not _has_block_types(template) else None
    return DatabasePlan(migrate=alembic_revision(database) != head, seeded=seeded, save_to=save_to,
                        database=database, register_blocks=not (seeded and _blocks_in_template(template)))


def _blocks_in_template(template: Path) -> bool:
    """Whether a new home's copy of ``template`` already holds what Prefect's block registration
    would write at the server's start (0.6 CPU s there even when nothing is new, since a new
    ``PREFECT_HOME`` has no memo of it): the template has block types (a server of this Prefect
    version registered them: the template is per version) and no Prefect collection is
    installed (one could add block types the template lacks)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True, timeout=5)) as con:
            registered = con.execute("SELECT 1 FROM block_type LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False
    return registered and not metadata.entry_points(group="prefect.collections")


def _has_block_types(database: Path) -> bool:
    """Whether a template holds Prefect's registered block types (True if it cannot tell)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as con:
            return con.execute("SELECT 1 FROM block_type LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return True


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


def _migrated(home: str, timeout: float) -> Path:
    """A new database migrated by Prefect's own ``create_db`` in an isolated ``PREFECT_HOME``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=home, PREFECT_PROFILES_PATH=str(Path(home) / "profiles.toml"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false")
    subprocess.run([sys.executable, "-c", _MIGRATE], env=env, cwd=home, check=True, timeout=timeout,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return Path(home) / "prefect.db"


def build_template(timeout: float = 600.0, migrate: bool = False) -> Path | None:
    """The template for the installed Prefect version, built now if missing: from the shipped
    schema when it matches, else (or with ``migrate``) by Prefect's own migrations in an
    isolated ``PREFECT_HOME``; None without Prefect."""
    template = template_path()
    if template is None or alembic_revision(template) is not None:
        return template
    if not migrate and _template_from_schema(template):
        return template
    template.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=template.parent) as home:
        database = _migrated(home, timeout)
        save_template(DatabasePlan(migrate=True, save_to=template, database=database))
    return template if alembic_revision(template) is not None else None


# The shipped schema: one file per Prefect version, its first line naming the Alembic revision.
SCHEMA_DIR = Path(__file__).with_name("prefect_schema")
_HEADER = "-- dpsynth: the SQLite schema Prefect {version}'s migrations create, at Alembic revision {revision}"
_HEADER_RE = re.compile(r"-- dpsynth: the SQLite schema Prefect (\S+)'s migrations create, at Alembic revision (\w+)")
_REVISION = re.compile(r"^revision\b[^=\n]*=\s*['\"](\w+)['\"]", re.MULTILINE)
_DOWN = re.compile(r"^down_revision\b[^=\n]*=(.*)$", re.MULTILINE)


def migration_head() -> str | None:
    """The head revision of the installed Prefect's SQLite migration scripts, read as text
    (importing Alembic and Prefect's settings costs 1-2 s); None if not exactly one head."""
    spec = importlib.util.find_spec("prefect")
    if spec is None or not spec.submodule_search_locations:
        return None
    versions = Path(list(spec.submodule_search_locations)[0]) / "server/database/_migrations/versions/sqlite"
    revisions, parents = set(), set()
    for script in versions.glob("*.py"):
        text = script.read_text(errors="replace")
        rev, down = _REVISION.search(text), _DOWN.search(text)
        if rev is None or down is None:
            continue  # not a migration script
        revisions.add(rev.group(1))
        parents.update(re.findall(r"['\"](\w+)['\"]", down.group(1)))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def schema_sql(database: Path) -> str:
    """A migrated Prefect database as SQL text: every table, index, trigger and view of
    ``sqlite_master`` (tables first, by name) and the ``alembic_version`` row. Refuses a
    database holding any other row (the text carries the schema, no data)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as con:
        entries = con.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE "
                              "'sqlite_%' ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, "
                              "name").fetchall()
        for kind, name, _ in entries:
            if kind == "table" and name != "alembic_version" and con.execute(f'SELECT 1 FROM "{name}"').fetchone():
                raise ValueError(f"the database holds rows in {name}: not a freshly migrated one")
        (revision,), = con.execute("SELECT version_num FROM alembic_version").fetchall()
    version = metadata.version("prefect")
    lines = [_HEADER.format(version=version, revision=revision), "BEGIN;"]
    lines += [f"{sql};" for _, _, sql in entries]  # as stored, its whitespace included
    lines += [f"INSERT INTO alembic_version (version_num) VALUES ('{revision}');", "COMMIT;", ""]
    return "\n".join(lines)


def write_schema(timeout: float = 600.0) -> Path:
    """Regenerates the shipped schema of the installed Prefect from its own migrations."""
    target = SCHEMA_DIR / f"prefect-{metadata.version('prefect')}.sql"
    with tempfile.TemporaryDirectory(prefix="dpsynth-prefect-schema-") as home:
        text = schema_sql(_migrated(home, timeout))
    target.parent.mkdir(exist_ok=True)
    target.write_text(text)
    return target


def shipped_schema() -> str | None:
    """The shipped schema's SQL text when it is the installed Prefect's: same version and
    the same head revision of its migration scripts; else None (Prefect migrates)."""
    try:
        version = metadata.version("prefect")
        text = (SCHEMA_DIR / f"prefect-{version}.sql").read_text()
    except (metadata.PackageNotFoundError, OSError):
        return None
    header = _HEADER_RE.match(text)
    if header is None or header.group(1) != version or header.group(2) != migration_head():
        return None
    return text


def _template_from_schema(template: Path) -> bool:
    """Creates the template from the shipped schema (tens of ms, against 5-9 s of migrations)
    if it matches the installed Prefect; a template another process made meanwhile is kept."""
    text = shipped_schema()
    if text is None:
        return False
    try:
        template.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".prefect-db-", dir=template.parent)
        os.close(fd)
        try:
            with contextlib.closing(sqlite3.connect(tmp, isolation_level=None)) as con:
                con.executescript(text)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, template)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except (OSError, sqlite3.Error):
        return False
    return alembic_revision(template) is not None


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Builds the Prefect database template in the user's cache.")
    ap.add_argument("--migrate", action="store_true", help="by Prefect's migrations, not the shipped schema")
    ap.add_argument("--write-schema", action="store_true", help="regenerate the shipped schema from the migrations")
    opts = ap.parse_args()
    if opts.write_schema:
        print(f"wrote {write_schema()}")
    else:
        built = build_template(migrate=opts.migrate)
        print(f"Prefect database template: {built or 'not built (Prefect is not installed)'}")
