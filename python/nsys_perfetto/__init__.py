"""nsys-perfetto: convert NVIDIA Nsight Systems profiles into Perfetto traces.

The wheel carries the ``nsys-perfetto`` binary; this package only finds it
(:func:`find_nsys_perfetto_bin`) so that ``python -m nsys_perfetto`` works where the
scripts directory is not on ``PATH``.
"""

import os
import sysconfig

__all__ = ["find_nsys_perfetto_bin"]

_EXE = "nsys-perfetto" + (sysconfig.get_config_var("EXE") or "")


def find_nsys_perfetto_bin() -> str:
    """The path of the ``nsys-perfetto`` binary installed with this package."""
    candidates = [sysconfig.get_path("scripts")]
    # `pip install --user` puts scripts under the user scheme.
    user_scheme = {"posix": "posix_user", "nt": "nt_user"}.get(os.name)
    if user_scheme and user_scheme in sysconfig.get_scheme_names():
        candidates.append(sysconfig.get_path("scripts", scheme=user_scheme))
    # A target directory (`pip install --target DIR`) has bin/ beside the package.
    candidates.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin"))
    for directory in candidates:
        path = os.path.join(directory, _EXE)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        f"{_EXE} not found in {', '.join(candidates)}; reinstall with `pip install nsys-perfetto`"
    )
