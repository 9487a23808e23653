"""``python -m nsys_perfetto ARGS...`` runs the bundled ``nsys-perfetto`` binary."""

import os
import subprocess
import sys

from nsys_perfetto import find_nsys_perfetto_bin


def main() -> int:
    exe = find_nsys_perfetto_bin()
    args = [exe, *sys.argv[1:]]
    if os.name == "posix":
        os.execv(exe, args)
    return subprocess.run(args).returncode


if __name__ == "__main__":
    sys.exit(main())
