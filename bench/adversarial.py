#!/usr/bin/env python3
"""Adversarial inputs for the layout: a real export (grown with amplify_trace.py) whose event
tables are rewritten with SQL so rows arrive in the worst orders and shapes.

usage: adversarial.py KIND IN.sqlite OUT.sqlite
  reverse-nvtx   NVTX_EVENTS stored in reverse start order (every row earlier than the last)
  shuffle-gpu    CUPTI_ACTIVITY_KIND_KERNEL stored in a fixed pseudo-random order (rows far
                 beyond the 32,768-row reorder window)
  overlap-gpu    every kernel on one stream and 1 s long: hundreds overlap at any time
  stream-per-kernel  every kernel on a stream of its own
The in-order twin of each is IN.sqlite itself.
"""
import shutil, sqlite3, sys

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def restore(db, table, order):
    """Rewrite `table` with its rows stored in `order` (rowids follow storage order)."""
    db.execute(f'CREATE TEMP TABLE t AS SELECT * FROM "{table}" ORDER BY {order}')
    db.execute(f'DELETE FROM "{table}"')
    db.execute(f'INSERT INTO "{table}" SELECT * FROM temp.t')
    db.execute("DROP TABLE temp.t")


def main():
    kind, src, dst = sys.argv[1:4]
    shutil.copyfile(src, dst)
    db = sqlite3.connect(dst)
    db.execute("PRAGMA journal_mode=OFF")
    if kind == "reverse-nvtx":
        restore(db, "NVTX_EVENTS", "start DESC")
    elif kind == "shuffle-gpu":
        n = db.execute(f"SELECT count(*) FROM {KERNEL}").fetchone()[0]
        restore(db, KERNEL, f"(rowid * 2654435761) % {max(n, 1) * 4 + 1}")
    elif kind == "overlap-gpu":
        db.execute(f"UPDATE {KERNEL} SET streamId = 7, \"end\" = start + 1000000000")
    elif kind == "stream-per-kernel":
        db.execute(f"UPDATE {KERNEL} SET streamId = 1000 + rowid")
    else:
        sys.exit(f"unknown kind {kind}")
    db.commit()
    db.execute("VACUUM")
    db.close()


if __name__ == "__main__":
    main()
