#!/usr/bin/env python3
"""Write the Parquet export a grown export would have had, in nsys' own layout.

From the grown export's Arrow twin (amplify_arrow.py), each table nsys' own `--type parquetdir`
export of the report holds is written as nsys writes it: nsys' column types (NSYS_PQTDIR, the
report's real Parquet export), uncompressed, in row groups of nsys' size (about 2 k rows).

usage: amplify_parquet.py GROWN_ARWDIR NSYS_PQTDIR OUT_DIR
"""
import os, sys

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

ROW_GROUP = 2048


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    grown, model, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(model)):
        if not name.endswith(".parquet"):
            continue
        table = name[: -len(".parquet")]
        src = os.path.join(grown, table + ".arrow")
        if not os.path.exists(src):
            continue
        with ipc.open_stream(src) as r:
            data = r.read_all()
        schema = pq.read_schema(os.path.join(model, name))
        fields = [f for f in schema if f.name in data.column_names]
        data = data.select([f.name for f in fields]).cast(pa.schema(fields))
        pq.write_table(data, os.path.join(out, name), row_group_size=ROW_GROUP, compression="none")


if __name__ == "__main__":
    main()
