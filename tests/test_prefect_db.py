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


def test_without_a_template_the_new_database_is_kept_as_one_after_the_start(homes):
    home, template = homes
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
    seen = []

    class _Popen:
        def __init__(self, cmd, env, **kwargs):
            seen.append(env)
            self.pid = 0

        def poll(self):
            return 0

    monkeypatch.setattr(srv.subprocess, "Popen", _Popen)
    monkeypatch.setattr(srv.atexit, "register", lambda fn: None)
    launched = srv._launch()  # no template yet: Prefect migrates; its database is the next template
    assert "PREFECT_SERVER_DATABASE_MIGRATE_ON_START" not in seen[-1] and launched.database.save_to == template
    _fake_db(template)
    launched = srv._launch()
    assert seen[-1]["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] == "false" and launched.database is None
    assert (home / "prefect.db").exists()


@pytest.mark.slow
def test_a_server_started_from_the_built_template_serves_a_release(tmp_path):
    """The template Prefect's own migrations build has the schema at Alembic's head (as
    Prefect's scripts say it); a first release in a new PREFECT_HOME starts from it and its
    flow run is recorded, completed, in that home's database."""
    from alembic.script import ScriptDirectory

    from prefect.server.database.alembic_commands import alembic_config

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), DPSYNTH_PREFECT_PORT="0",
               PREFECT_HOME=str(tmp_path / "home"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    built = subprocess.run([sys.executable, "-m", "dpsynth.orchestration.prefect_db"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    template = tmp_path / "cache" / "dpsynth" / "prefect-db" / pdb.metadata.version("prefect") / "prefect.db"
    assert built.returncode == 0 and str(template) in built.stdout
    scripts = ScriptDirectory.from_config(alembic_config())
    scripts.version_locations = [str(Path(scripts.dir) / "versions" / "sqlite")]  # as Prefect's env.py does
    head = scripts.get_current_head()
    assert head is not None
    assert pdb.alembic_revision(template) == head
    (tmp_path / "seed").write_bytes(b"s" * 32)
    run = subprocess.run([sys.executable, "-m", "dpsynth", "release", "--data", str(ROOT / "data" / "demo.csv"),
                          "--schema", str(ROOT / "schemas" / "demo.yaml"), "--epsilon", "1", "--seed-file",
                          str(tmp_path / "seed"), "--out", str(tmp_path / "out"), "--workspace",
                          str(tmp_path / "ws"), "--name", "seeded", "--engine", "prefect"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    database = tmp_path / "home" / "prefect.db"
    with sqlite3.connect(database) as con:
        runs = con.execute("SELECT state_type FROM flow_run").fetchall()
        names = {r[0] for r in con.execute("SELECT name FROM block_type")}
    assert runs == [("COMPLETED",)] and "Local File System" in names
    assert pdb.alembic_revision(database) == head
    assert _schema(database) == _schema(template)  # the template's schema, as Prefect's migrations made it
