"""The temporary Prefect server's database from a template (issue 25, a first release's
start-up): a new PREFECT_HOME gets a copy with the migrated schema, nothing is touched when a
database setting or another revision is in play, and a server started from it serves a run."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dpsynth.orchestration import prefect_db as pdb
from dpsynth.orchestration import server as srv

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_QUERY = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"


def _fake_db(path: Path, revision: str = "rev-a") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        con.execute("CREATE TABLE flow_run (id TEXT PRIMARY KEY, name TEXT)")
        con.execute("CREATE INDEX ix_flow_run__name ON flow_run (name)")
        con.execute("CREATE TABLE task_run (id TEXT PRIMARY KEY)")
        con.execute("CREATE TABLE log (id TEXT PRIMARY KEY)")
        con.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    return path


def _schema(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as con:
        return con.execute(SCHEMA_QUERY).fetchall()


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """An empty PREFECT_HOME and user cache, no Prefect setting in the environment."""
    for k in [k for k in os.environ if k.startswith("PREFECT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home", pdb.template_path()


def test_a_new_home_starts_from_a_copy_of_the_template(homes):
    home, template = homes
    _fake_db(template)
    plan = pdb.plan_database()
    assert plan == pdb.DatabasePlan(migrate=False, seeded=True, database=home / "prefect.db")
    assert _schema(home / "prefect.db") == _schema(template)
    assert pdb.alembic_revision(home / "prefect.db") == "rev-a"
    assert not list(home.glob(".prefect-db-*"))  # no temporary copy left


def test_a_home_at_the_templates_revision_skips_the_check_another_revision_keeps_it(homes):
    home, template = homes
    _fake_db(template, "rev-b")
    _fake_db(home / "prefect.db", "rev-b")
    assert pdb.plan_database() == pdb.DatabasePlan(migrate=False, database=home / "prefect.db")
    with sqlite3.connect(home / "prefect.db") as con:
        con.execute("UPDATE alembic_version SET version_num = 'rev-old'")
    plan = pdb.plan_database()
    assert plan.migrate and not plan.seeded and plan.save_to is None
    assert pdb.alembic_revision(home / "prefect.db") == "rev-old"  # left to Prefect's migrations


def test_without_a_template_the_new_database_is_kept_as_one_after_the_start(homes, monkeypatch):
    home, template = homes
    monkeypatch.setattr(pdb, "shipped_schema", lambda: None)  # another Prefect than the shipped schema's
    plan = pdb.plan_database()
    assert plan == pdb.DatabasePlan(migrate=True, save_to=template, database=home / "prefect.db")
    assert not pdb.save_template(plan)  # the server has not created it yet
    _fake_db(home / "prefect.db", "rev-c")  # what the server's start-up created
    assert pdb.save_template(plan) and pdb.alembic_revision(template) == "rev-c"
    assert sorted(p.name for p in template.parent.iterdir()) == ["prefect.db"]  # one file, read-only use
    assert _schema(template) == _schema(home / "prefect.db")
    # a database another command's run already wrote to is not kept as the template
    other_home = home.parent / "other-home"
    with sqlite3.connect(_fake_db(other_home / "prefect.db", "rev-d")) as con:
        con.execute("INSERT INTO flow_run VALUES ('1', 'someone-elses-release')")
    assert not pdb.save_template(pdb.DatabasePlan(migrate=True, save_to=template, database=other_home / "prefect.db"))
    assert pdb.alembic_revision(template) == "rev-c"
    # an existing database (perhaps with runs in it) is never made a template
    other = pdb.plan_database()
    assert other.save_to is None and not other.migrate


@pytest.mark.parametrize("where", ["environment", "profile", "prefect.toml", "pyproject", "home in prefect.toml",
                                   ".env"])
def test_a_database_setting_anywhere_leaves_everything_to_prefect(homes, monkeypatch, where):
    home, template = homes
    _fake_db(template)
    if where == "environment":
        monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db.invalid/prefect")
    elif where == "profile":
        home.mkdir(parents=True)
        (home / "profiles.toml").write_text('[profiles.default]\nPREFECT_SERVER_DATABASE_CONNECTION_URL = "x"\n')
    elif where == "prefect.toml":
        Path("prefect.toml").write_text("[server.database]\nconnection_url = 'x'\n")
    elif where == "pyproject":
        Path("pyproject.toml").write_text("[tool.prefect.server.database]\nconnection_url = 'x'\n")
    elif where == ".env":
        Path(".env").write_text("PREFECT_SERVER_DATABASE_CONNECTION_URL=x\n")
    else:  # another PREFECT_HOME: the server's database would not be the one looked at here
        Path("prefect.toml").write_text("home = '/elsewhere'\n")
    assert pdb.plan_database() == pdb.DatabasePlan(migrate=True)
    assert not (home / "prefect.db").exists()


def test_settings_unrelated_to_prefects_database_do_not_count(homes):
    home, template = homes
    _fake_db(template)
    Path("pyproject.toml").write_text('[project]\ndescription = "a database tool"\n')
    Path(".env").write_text("JAVA_HOME=/opt/java\nDATABASE_URL=postgres://app\n")
    Path("prefect.toml").write_text("[logging]\nlevel = 'INFO'\n")
    assert pdb.plan_database().seeded


def test_a_database_created_meanwhile_is_kept_not_overwritten(homes):
    home, template = homes
    _fake_db(template, "rev-t")
    _fake_db(home / "prefect.db", "rev-theirs")
    assert not pdb._copy_new(template, home / "prefect.db")
    assert pdb.alembic_revision(home / "prefect.db") == "rev-theirs"


def test_the_launch_turns_the_check_off_only_at_the_templates_revision(homes, monkeypatch):
    home, template = homes
    monkeypatch.setattr(pdb, "shipped_schema", lambda: None)  # another Prefect than the shipped schema's
    seen = _fake_popen(monkeypatch)
    launched = srv._launch()  # no template yet: Prefect migrates; its database is the next template
    assert "PREFECT_SERVER_DATABASE_MIGRATE_ON_START" not in seen[-1] and launched.database.save_to == template
    _fake_db(template)
    launched = srv._launch()
    assert seen[-1]["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] == "false" and launched.database is None
    assert (home / "prefect.db").exists()


def _fake_popen(monkeypatch) -> list[dict]:
    """The temporary server's process replaced by a stand-in: each launch's environment, with the
    settings its start order (the line on its stdin) adds, is appended to the returned list."""
    import io
    import json

    seen: list[dict] = []

    class _Order(io.BytesIO):
        def close(self):
            seen[-1].update(json.loads(self.getvalue())["env"])

    class _Popen:
        def __init__(self, cmd, env, **kwargs):
            seen.append(dict(env))
            self.pid, self.stdin = 0, _Order()

        def poll(self):
            return 0

    monkeypatch.setattr(srv.subprocess, "Popen", _Popen)
    monkeypatch.setattr(srv.atexit, "register", lambda fn: None)
    return seen


def _shipped_file() -> Path:
    return pdb.SCHEMA_DIR / f"prefect-{pdb.metadata.version('prefect')}.sql"


def _from_script(path: Path, text: str) -> Path:
    with sqlite3.connect(path, isolation_level=None) as con:
        con.executescript(text)
    return path


def test_the_shipped_schema_is_the_installed_prefects():
    """A Prefect upgrade without a regenerated schema would silently fall back to migrating:
    this says so (``python -m dpsynth.orchestration.prefect_db --write-schema``)."""
    text = pdb.shipped_schema()
    assert text is not None, f"regenerate {_shipped_file().name} for this Prefect"
    assert f"VALUES ('{pdb.migration_head()}')" in text


def test_an_empty_cache_is_filled_from_the_shipped_schema_without_migrating(homes, tmp_path):
    home, template = homes
    plan = pdb.plan_database()
    assert plan == pdb.DatabasePlan(migrate=False, seeded=True, save_to=template, database=home / "prefect.db")
    reference = _from_script(tmp_path / "reference.db", _shipped_file().read_text())
    assert _schema(template) == _schema(reference) == _schema(home / "prefect.db")
    assert pdb.alembic_revision(home / "prefect.db") == pdb.migration_head() is not None
    assert sorted(p.name for p in template.parent.iterdir()) == ["prefect.db"]  # no temporary file left
    assert pdb.build_template() == template  # already there: nothing rebuilt


def test_the_servers_database_with_its_block_types_replaces_a_template_made_from_the_schema(homes, monkeypatch):
    """Made from the schema, the template has no block types (the server registers them at
    its start, about 1 CPU s in every new PREFECT_HOME): once the server answers, its database
    (block types, no run) is kept as the template; the next new home copies that one."""
    home, template = homes
    plan = pdb.plan_database()
    with sqlite3.connect(home / "prefect.db") as con:  # what the server's start-up registers
        con.execute("INSERT INTO block_type (id, name, slug) VALUES ('1', 'Local File System', 'local-file-system')")
    assert plan.save_to == template and pdb.save_template(plan)
    with sqlite3.connect(template) as con:
        assert con.execute("SELECT name FROM block_type").fetchall() == [("Local File System",)]
    next_home = home.parent / "next-home"
    monkeypatch.setenv("PREFECT_HOME", str(next_home))
    assert pdb.plan_database() == pdb.DatabasePlan(migrate=False, seeded=True, database=next_home / "prefect.db",
                                                   register_blocks=False)


def test_a_copy_with_the_block_types_skips_prefects_block_registration(homes, monkeypatch):
    """A new PREFECT_HOME has no memo of a registration, so Prefect's server registered every
    block type again at its start (0.6 CPU s on a first release's critical path) although the
    copy already holds them: it is now started with registration off, unless the template has
    none, a Prefect collection is installed (it may add block types), or the user set it."""
    home, template = homes
    monkeypatch.setattr(pdb, "shipped_schema", lambda: None)
    seen = _fake_popen(monkeypatch)
    _fake_db(template)  # no block types: registered at the start, as before
    srv._launch()
    assert "PREFECT_API_BLOCKS_REGISTER_ON_START" not in seen[-1]
    with sqlite3.connect(template) as con:
        con.execute("CREATE TABLE block_type (id TEXT PRIMARY KEY, name TEXT, slug TEXT)")
        con.execute("INSERT INTO block_type VALUES ('1', 'Local File System', 'local-file-system')")
    for i, (collections, user, expected) in enumerate([([], None, "false"), (["prefect_aws"], None, None),
                                                      ([], "true", "true")]):
        monkeypatch.setenv("PREFECT_HOME", str(home.parent / f"home-{i}"))
        monkeypatch.setattr(pdb.metadata, "entry_points", lambda group, c=collections: c)
        if user:
            monkeypatch.setenv("PREFECT_API_BLOCKS_REGISTER_ON_START", user)
        srv._launch()
        assert seen[-1].get("PREFECT_API_BLOCKS_REGISTER_ON_START") == expected
    monkeypatch.setenv("PREFECT_HOME", str(home))  # the first home's database exists: no copy, Prefect's memo decides
    monkeypatch.delenv("PREFECT_API_BLOCKS_REGISTER_ON_START")
    monkeypatch.setattr(pdb.metadata, "entry_points", lambda group: [])
    assert pdb.plan_database().register_blocks


@pytest.mark.parametrize("mismatch", ["revision", "version", "header", "no file"])
def test_a_version_or_revision_mismatch_falls_back_to_prefects_migrations(homes, monkeypatch, tmp_path, mismatch):
    home, _ = homes
    if mismatch == "revision":  # the installed Prefect's scripts end at another revision
        monkeypatch.setattr(pdb, "migration_head", lambda: "0123456789ab")
    elif mismatch == "version":  # another Prefect version: no file of that name
        monkeypatch.setattr(pdb.metadata, "version", lambda name: "3.99.0")
    else:
        shipped = tmp_path / "shipped"
        shipped.mkdir()
        if mismatch == "header":  # a file whose header names another version
            (shipped / _shipped_file().name).write_text(_shipped_file().read_text().replace(
                f"Prefect {pdb.metadata.version('prefect')}'s", "Prefect 0.0.1's", 1))
        monkeypatch.setattr(pdb, "SCHEMA_DIR", shipped)
    template = pdb.template_path()
    assert pdb.shipped_schema() is None
    assert pdb.plan_database() == pdb.DatabasePlan(migrate=True, save_to=template, database=home / "prefect.db")
    assert not template.exists() and not (home / "prefect.db").exists()


@pytest.mark.slow
def test_the_migration_head_read_as_text_is_alembics():
    from alembic.script import ScriptDirectory

    from prefect.server.database.alembic_commands import alembic_config

    scripts = ScriptDirectory.from_config(alembic_config())
    scripts.version_locations = [str(Path(scripts.dir) / "versions" / "sqlite")]  # as Prefect's env.py does
    assert pdb.migration_head() == scripts.get_current_head() is not None


def test_a_migrated_database_holding_rows_is_not_written_as_a_schema(tmp_path):
    with sqlite3.connect(_fake_db(tmp_path / "p.db")) as con:
        con.execute("INSERT INTO flow_run VALUES ('1', 'a-run')")
    with pytest.raises(ValueError, match="flow_run"):
        pdb.schema_sql(tmp_path / "p.db")


def _items(body: str) -> list[str]:
    """A CREATE TABLE's body split at its top-level commas (not inside parentheses or quotes)."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(body):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    return items + [body[start:].strip()]


def _canonical(text: str, tmp: Path) -> list[tuple]:
    """A schema script's ``sqlite_master`` with each table's constraints in name order: Prefect's
    own migrations write a recreated table's foreign keys and unique constraints in an order
    that varies from run to run (the same schema; two runs of ``create_db`` differ so)."""
    out = []
    for kind, name, table, sql in _schema(_from_script(tmp, text)):
        if kind == "table":
            head, body = sql[:sql.index("(")], sql[sql.index("(") + 1:sql.rindex(")")]
            items = _items(body)
            columns = [i for i in items if not i.upper().startswith("CONSTRAINT")]
            sql = (head, columns, sorted(i for i in items if i.upper().startswith("CONSTRAINT")))
        out.append((kind, name, table, sql))
    return out


def test_the_canonical_form_ignores_constraint_order_only(tmp_path):
    one = "CREATE TABLE t (a INT, b TEXT DEFAULT 'x,(y', CONSTRAINT u UNIQUE (a, b), CONSTRAINT f CHECK (a > 0));"
    two = "CREATE TABLE t (a INT, b TEXT DEFAULT 'x,(y', CONSTRAINT f CHECK (a > 0), CONSTRAINT u UNIQUE (a, b));"
    three = "CREATE TABLE t (b TEXT DEFAULT 'x,(y', a INT, CONSTRAINT u UNIQUE (a, b), CONSTRAINT f CHECK (a > 0));"
    assert _canonical(one, tmp_path / "1.db") == _canonical(two, tmp_path / "2.db")
    assert _canonical(one, tmp_path / "3.db") != _canonical(three, tmp_path / "4.db")  # column order counts


@pytest.mark.slow
def test_prefects_migrations_regenerate_the_shipped_schema(tmp_path):
    """The shipped file is what ``--write-schema`` makes from Prefect's own migrations now
    (up to the order of a table's constraints, which varies between runs of the migrations)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    code = ("import tempfile, pathlib; from dpsynth.orchestration import prefect_db as p\n"
            "with tempfile.TemporaryDirectory() as h: print(p.schema_sql(p._migrated(h, 600)), end='')")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    shipped = _shipped_file().read_text()
    assert out.stdout.splitlines()[0] == shipped.splitlines()[0]  # version and Alembic revision
    assert _canonical(out.stdout, tmp_path / "new.db") == _canonical(shipped, tmp_path / "shipped.db")
    assert len(_schema(tmp_path / "new.db")) == len(_schema(tmp_path / "shipped.db")) > 200


def _fresh_user_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment with no Prefect setting, an empty cache and a new PREFECT_HOME under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), DPSYNTH_PREFECT_PORT="0",
               PREFECT_HOME=str(tmp_path / "home"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return env


def _prefect_demo_release(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The demo release through the CLI on the Prefect engine (its temporary server), seeded."""
    (tmp_path / "seed").write_bytes(b"s" * 32)
    return subprocess.run([sys.executable, "-m", "dpsynth", "release", "--data", str(ROOT / "data" / "demo.csv"),
                           "--schema", str(ROOT / "schemas" / "demo.yaml"), "--epsilon", "1", "--seed-file",
                           str(tmp_path / "seed"), "--out", str(tmp_path / "out"), "--workspace",
                           str(tmp_path / "ws"), "--name", "seeded", "--engine", "prefect"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_first_release_with_an_empty_cache_runs_on_the_shipped_schema(tmp_path):
    """A first release in a new PREFECT_HOME with an empty user cache (a ``pip install``
    user): the template is made from the shipped schema, the server starts on a copy without
    migrating, registers its block types (its database is then kept as the template, without
    any run) and records the flow run, completed; the schema is still the shipped one."""
    env = _fresh_user_env(tmp_path)
    run = _prefect_demo_release(tmp_path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    template = tmp_path / "cache" / "dpsynth" / "prefect-db" / pdb.metadata.version("prefect") / "prefect.db"
    database = tmp_path / "home" / "prefect.db"
    with sqlite3.connect(database) as con:
        runs = con.execute("SELECT state_type FROM flow_run").fetchall()
        names = {r[0] for r in con.execute("SELECT name FROM block_type")}
    with sqlite3.connect(template) as con:  # made from the script, then the server's database (no run) kept
        assert "Local File System" in {r[0] for r in con.execute("SELECT name FROM block_type")}
        assert con.execute("SELECT count(*) FROM flow_run").fetchone() == (0,)
    assert runs == [("COMPLETED",)] and "Local File System" in names
    assert pdb.alembic_revision(database) == pdb.migration_head() is not None
    reference = _from_script(tmp_path / "reference.db", _shipped_file().read_text())
    assert _schema(database) == _schema(template) == _schema(reference)


@pytest.mark.slow
def test_a_template_built_by_prefects_migrations_serves_a_release(tmp_path):
    """The fallback: ``--migrate`` builds the template with Prefect's own migrations (what a
    Prefect without a matching shipped schema gets); a release on a copy completes."""
    env = _fresh_user_env(tmp_path)
    built = subprocess.run([sys.executable, "-m", "dpsynth.orchestration.prefect_db", "--migrate"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    template = tmp_path / "cache" / "dpsynth" / "prefect-db" / pdb.metadata.version("prefect") / "prefect.db"
    assert built.returncode == 0 and str(template) in built.stdout
    assert pdb.alembic_revision(template) == pdb.migration_head() is not None
    run = _prefect_demo_release(tmp_path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    database = tmp_path / "home" / "prefect.db"
    with sqlite3.connect(database) as con:
        runs = con.execute("SELECT state_type FROM flow_run").fetchall()
    assert runs == [("COMPLETED",)]
    assert _schema(database) == _schema(template)  # the template's schema, as Prefect's migrations made it
