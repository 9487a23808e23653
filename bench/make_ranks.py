#!/usr/bin/env python3
"""N reports of one MPI job from a few real rank exports: rank_0000.sqlite ... in OUT, each a copy
of SOURCE[k % len(SOURCES)] that records rank k (OMPI_COMM_WORLD_RANK in the environment nsys
kept) on host nodeNNN (8 ranks a node), as `merge` reads a report's rank and host.

  bench/make_ranks.py N OUT [SOURCE.sqlite...]    (default: tests/fixtures/mpi/rank_*.sqlite)
"""
import glob
import os
import re
import shutil
import sqlite3
import sys

RANKS_PER_NODE = 8


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    n, out = int(sys.argv[1]), sys.argv[2]
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    sources = sys.argv[3:] or sorted(glob.glob(os.path.join(here, "tests/fixtures/mpi/rank_*.sqlite")))
    os.makedirs(out, exist_ok=True)
    for k in range(n):
        path = os.path.join(out, f"rank_{k:04}.sqlite")
        shutil.copyfile(sources[k % len(sources)], path)
        db = sqlite3.connect(path)
        # Values nsys recorded as bytes that are not UTF-8 stay as they are.
        db.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        rows = db.execute(
            "SELECT rowid, globalVid, devStateName, name, nameEnum, value FROM TARGET_INFO_SYSTEM_ENV"
        ).fetchall()
        vid, state = rows[0][1], rows[0][2]

        def put(name, enum, value):
            row = next((r for r in rows if r[3] == name), None)
            if row:
                db.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE rowid = ?", (value, row[0]))
            else:
                db.execute(
                    "INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (vid, state, name, enum, value),
                )

        env = next((r[5] for r in rows if r[3] == "DeviceEnvironment"), "") or ""
        env = re.sub(r"(^|[;\0])OMPI_COMM_WORLD_RANK=[^;\0]*", "", env).strip(";")
        put("DeviceEnvironment", 610, f"{env};OMPI_COMM_WORLD_RANK={k}" if env else f"OMPI_COMM_WORLD_RANK={k}")
        put("Hostname", 619, f"node{k // RANKS_PER_NODE:03}")
        db.commit()
        db.close()


if __name__ == "__main__":
    main()
