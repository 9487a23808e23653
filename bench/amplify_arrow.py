#!/usr/bin/env python3
"""Write the Arrow export a grown SQLite export would have had, in nsys' own layout.

nsys cannot export the benchmark's grown SQLite file (amplify_trace.py makes it from a real
export), so this writes its tables as nsys' `--type arrowdir` export of the same report writes
them: the tables and the column types of NSYS_ARROWDIR (nsys' own Arrow export of the report
the SQLite export was grown from), one IPC stream file a table, one record batch a table, with
nsys' schema and field metadata. Tables nsys leaves out of its Arrow export stay out.

usage: amplify_arrow.py GROWN.sqlite NSYS_ARROWDIR OUT_DIR
"""
import os, sqlite3, sys

import pyarrow as pa
import pyarrow.ipc as ipc


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    grown, model, out = sys.argv[1:]
    db = sqlite3.connect(f"file:{grown}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(model)):
        if not name.endswith(".arrow"):
            continue
        table = name[: -len(".arrow")]
        with ipc.open_stream(os.path.join(model, name)) as r:
            schema = r.schema
        if table not in tables:
            continue
        present = {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}
        schema = pa.schema([f for f in schema if f.name in present], metadata=schema.metadata)
        arrays = []
        for f in schema:
            # A column at a time: the grown tables are millions of rows.
            values = [r[0] for r in db.execute(f'SELECT "{f.name}" FROM "{table}" ORDER BY rowid')]
            if pa.types.is_unsigned_integer(f.type):
                # SQLite holds unsigned 64-bit values by their bits, as signed integers.
                values = [v & 0xFFFFFFFFFFFFFFFF if isinstance(v, int) else v for v in values]
            if pa.types.is_boolean(f.type):
                values = [None if v is None else bool(v) for v in values]
            arrays.append(pa.array(values, type=f.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        with ipc.new_stream(os.path.join(out, name), schema) as w:
            w.write_batch(batch)


if __name__ == "__main__":
    main()
