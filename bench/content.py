#!/usr/bin/env python3
"""What a trace holds, as trace_processor reads it, in a form two builds can be compared by.

  bench/content.py TRACE                 print the digest (one line per fact)
  bench/content.py --diff A B            compare two traces' digests; exit 1 if they differ
  bench/content.py --diff-dirs DA DB     the same for every trace name found in both folders

The digest: per slice category, the count, sums of ts and dur, the number of distinct names and
tracks, the depth; per arg key the count and the number of distinct values; flows; tracks by
type; threads and processes; sched, thread_state, counters and perf samples. It is what a
refactor must leave unchanged ("the same trace_processor content").

Needs `pip install perfetto==0.59.1` and ../shared/tools/perfetto/bin/trace_processor_shell
(or $TRACE_PROCESSOR_SHELL).
"""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
TP = os.environ.get(
    "TRACE_PROCESSOR_SHELL",
    os.path.join(HERE, "..", "..", "shared", "tools", "perfetto", "bin", "trace_processor_shell"),
)

QUERIES = [
    ("slices", """select coalesce(category, '') as cat, count(*) as n, sum(ts) as ts, sum(dur) as dur,
        count(distinct name) as names, count(distinct track_id) as tracks, max(depth) as depth
        from slice group by 1 order by 1"""),
    ("names", """select coalesce(category, '') as cat, name, count(*) as n, sum(dur) as dur
        from slice group by 1, 2 order by 1, 2"""),
    ("args", """select key, count(*) as n, count(distinct display_value) as vals
        from args where arg_set_id in (select arg_set_id from slice) group by key order by key"""),
    ("flows", "select count(*) as n, count(distinct slice_out) as outs, count(distinct slice_in) as ins from flow"),
    ("tracks", "select type, count(*) as n from track group by type order by type"),
    ("threads", "select count(*) as n, count(distinct tid) as tids, count(distinct name) as names from thread"),
    ("processes", "select count(*) as n, count(distinct pid) as pids, group_concat(distinct name) as names from (select * from process order by pid)"),
    ("sched", "select count(*) as n, sum(ts) as ts, sum(dur) as dur, count(distinct cpu) as cpus from sched where utid != 0"),
    ("thread_state", "select state, count(*) as n, sum(dur) as dur from thread_state group by state order by state"),
    ("counters", "select count(*) as n, sum(ts) as ts, sum(value) as v, count(distinct track_id) as tracks from counter"),
    ("samples", "select count(*) as n, sum(ts) as ts, count(distinct callsite_id) as stacks from perf_sample"),
]


def digest(path):
    from urllib.request import urlcleanup

    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    out = []
    tp = None
    try:
        # The client polls trace_processor's /status with urlretrieve, which keeps each reply
        # in a temporary file until urlcleanup: without it, every digest leaves one in $TMPDIR.
        tp = TraceProcessor(trace=path, config=TraceProcessorConfig(bin_path=TP))
        for label, sql in QUERIES:
            try:
                rows = [list(vars(r).values()) for r in tp.query(sql)]
            except Exception as e:  # a table this trace_processor lacks
                out.append(f"{label}\terror {type(e).__name__}: {e}")
                continue
            for row in rows:
                out.append(label + "\t" + "\t".join(str(v) for v in row))
    finally:
        if tp is not None:
            tp.close()
        urlcleanup()
    return out


def diff(a, b):
    da, db = digest(a), digest(b)
    if da == db:
        print(f"same: {a} {b} ({len(da)} facts)")
        return True
    sa, sb = set(da), set(db)
    print(f"DIFFERENT: {a} {b}")
    for line in da:
        if line not in sb:
            print("  - " + line)
    for line in db:
        if line not in sa:
            print("  + " + line)
    return False


def main(argv):
    if len(argv) == 2 and not argv[1].startswith("--"):
        print("\n".join(digest(argv[1])))
        return 0
    if len(argv) == 4 and argv[1] == "--diff":
        return 0 if diff(argv[2], argv[3]) else 1
    if len(argv) == 4 and argv[1] == "--diff-dirs":
        names = sorted(set(os.listdir(argv[2])) & set(os.listdir(argv[3])))
        ok = True
        for n in names:
            ok &= diff(os.path.join(argv[2], n), os.path.join(argv[3], n))
        print(f"{len(names)} traces compared")
        return 0 if ok else 1
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
