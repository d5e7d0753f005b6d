#!/usr/bin/env python3
"""The schema migrations on real PostgreSQL (the private cluster of
`mmh3 serve --mock`): a database an older mmh3 migrated to version 5, with
rows in it, and a fresh one both migrate to the newest version with the same
schema (pg_dump --schema-only); the newest migration is idempotent; the old
rows read through the one generation_json.

    tests/integration/migrate_test.py --build BUILD

Prints one "PASS name" / "FAIL name: why" line per test.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import traceback
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MIGRATIONS = sorted(glob.glob(os.path.join(SRC, "sql", "[0-9][0-9][0-9]_*.sql")))
NEWEST = int(os.path.basename(MIGRATIONS[-1])[:3])


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


class Databases:
    def __init__(self, stack):
        self.s = stack
        self.mmh3 = stack.mmh3

    def conninfo(self, db):
        return self.s.conninfo().replace("dbname=mmh3", "dbname=" + db)

    def create(self, db):
        self.s.psql("DROP DATABASE IF EXISTS %s" % db)
        self.s.psql("CREATE DATABASE %s" % db)

    def psql(self, db, sql=None, path=None):
        args = ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-1", self.conninfo(db)]
        args += ["-f", path] if path else ["-c", sql]
        out = subprocess.run(args, capture_output=True, text=True)
        check(out.returncode == 0, "psql %s: %s", path or sql, out.stderr.strip()[-800:])
        return out.stdout.strip()

    def migrate(self, db):
        """mmh3's own runner (every command that opens the database migrates it)."""
        out = subprocess.run([self.mmh3, "token", "list", "--db", self.conninfo(db)], capture_output=True, text=True)
        check(out.returncode == 0, "mmh3 token list: %s", out.stderr.strip()[-800:])

    def schema(self, db):
        out = subprocess.run(["pg_dump", "--schema-only", "--no-owner", "--no-privileges", self.conninfo(db)],
                             capture_output=True, text=True)
        check(out.returncode == 0, "pg_dump: %s", out.stderr.strip()[-800:])
        # comments, and the random keys of pg_dump's \restrict guard, differ between any two dumps
        lines = [ln for ln in out.stdout.splitlines()
                 if ln.strip() and not ln.startswith("--") and not ln.startswith(("\\restrict", "\\unrestrict"))]
        return "\n".join(lines)


def as_version_5(d, db):
    """A database as mmh3 up to version 5 left it: its migrations applied in
    order, recorded as the runner records them."""
    d.create(db)
    d.psql(db, "CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY, name text NOT NULL,"
               " applied_at timestamptz NOT NULL DEFAULT now())")
    for path in MIGRATIONS:
        name = os.path.basename(path)[:-4]
        version = int(name.split("_", 1)[0])
        if version > 5:
            break
        d.psql(db, path=path)
        d.psql(db, "INSERT INTO schema_migrations (version, name) VALUES (%d, '%s')" % (version, name))


def first_difference(a, b):
    al, bl = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(al, bl)):
        if x != y:
            return "line %d: %r vs %r" % (i + 1, x, y)
    return "lengths %d vs %d lines" % (len(al), len(bl))


def test_migrated_and_fresh_schemas_are_identical(d):
    check(len(MIGRATIONS) >= 6 and os.path.basename(MIGRATIONS[5]).startswith("006_"), "migrations: %r",
          [os.path.basename(m) for m in MIGRATIONS])
    as_version_5(d, "mig_old")
    gid, uid = str(uuid.uuid4()), str(uuid.uuid4())
    d.psql("mig_old", "INSERT INTO uploads (id, kind, path, content_type, bytes, width, height) VALUES"
                      " ('%s', 'image', 'uploads/%s.png', 'image/png', 1, 64, 64)" % (uid, uid))
    d.psql("mig_old", "INSERT INTO generations (id, prompt, image_ids, frames, width, height, steps, seed)"
                      " VALUES ('%s', 'from version 5', '{%s}', 22, 64, 64, 8, 7)" % (gid, uid))
    check(d.psql("mig_old", "SELECT count(*) FROM pg_proc WHERE proname = 'generation_json_004'") == "1",
          "version 5 has its generation_json_004")
    d.migrate("mig_old")
    d.create("mig_fresh")
    d.migrate("mig_fresh")
    old, fresh = d.schema("mig_old"), d.schema("mig_fresh")
    check("generation_json" in fresh and "loras" in fresh, "the dump shows the schema: %s", fresh[:300])
    check(old == fresh, "migrated and fresh schemas differ: %s", first_difference(old, fresh))
    for db in ("mig_old", "mig_fresh"):
        check(d.psql(db, "SELECT max(version) FROM schema_migrations") == str(NEWEST), "%s version", db)
        check(d.psql(db, "SELECT count(*) FROM schema_migrations") == str(len(MIGRATIONS)), "%s: every migration", db)
        check(d.psql(db, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'generation_json%'") == "1",
              "%s: one generation_json", db)
    # the rows of version 5 read through the new definition, with the new fields' defaults
    got = d.psql("mig_old", "SELECT generation_json(g)->>'prompt', generation_json(g)->'loras',"
                            " generation_json(g)->'sampler', generation_json(g)->>'sparse', generation_json(g)->>'cache',"
                            " generation_json(g)->'references'->0->>'image_id',"
                            " (generation_json(g)->>'enqueued_us')::bigint / 1000000 ="
                            "   (generation_json(g)->>'enqueued_at')::bigint"
                            " FROM generations g WHERE g.id = '%s'" % gid)
    check(got == "from version 5|[]|null|off|off|%s|t" % uid, "the old row: %r", got)


def test_the_newest_migration_is_idempotent(d):
    d.create("mig_twice")
    d.migrate("mig_twice")
    before = d.schema("mig_twice")
    d.psql("mig_twice", path=MIGRATIONS[-1])
    after = d.schema("mig_twice")
    check(before == after, "applying %s again changed the schema: %s", os.path.basename(MIGRATIONS[-1]),
          first_difference(before, after))
    d.migrate("mig_twice")  # and the runner, seeing it applied, leaves it
    check(d.schema("mig_twice") == before, "the runner changed a current schema")


def test_a_migration_numbered_below_the_newest_still_arrives(d):
    """Branches number their migrations as planned, so one can reach a database after a higher-numbered one:
    the runner applies every migration it has not recorded, not only those above the newest."""
    d.create("mig_gap")
    d.migrate("mig_gap")
    before = d.schema("mig_gap")
    d.psql("mig_gap", "DROP TABLE loras; DROP TABLE lora_catalog; DELETE FROM schema_migrations WHERE version = 7")
    check("lora_catalog" not in d.schema("mig_gap"), "the tables of 007 are gone")
    d.migrate("mig_gap")
    check(d.schema("mig_gap") == before, "007 was not applied below the newest: %s",
          first_difference(before, d.schema("mig_gap")))
    check(d.psql("mig_gap", "SELECT name FROM schema_migrations WHERE version = 7") == "007_loras", "007 recorded")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    a = ap.parse_args()
    s = Stack(a.build, mock_seconds=1.0)
    failed = 0
    try:
        s.start()
        d = Databases(s)
        for t in (test_migrated_and_fresh_schemas_are_identical, test_the_newest_migration_is_idempotent,
                  test_a_migration_numbered_below_the_newest_still_arrives):
            try:
                t(d)
                print("PASS %s" % t.__name__[5:])
            except Exception as e:  # noqa: BLE001 — every failure is a FAIL line
                failed += 1
                why = str(e) if isinstance(e, AssertionError) else traceback.format_exc().strip().splitlines()[-1]
                print("FAIL %s: %s" % (t.__name__[5:], re.sub(r"\s+", " ", why)))
            sys.stdout.flush()
    except Exception as e:  # noqa: BLE001
        failed += 1
        print("FAIL migrations/setup: %s" % e)
    finally:
        s.stop()
        s.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
