"""Add compiled bytecode to pyspark's own pyspark.zip and py4j zip, in the venv.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` and its py4j zip at the head
of PYTHONPATH for every Python process it starts (each daemon, worker, data
source planner and streaming source runner), so those processes import
pyspark from the zip and not from site-packages. The wheel's zip holds
sources only, and zipimport writes no .pyc: every such process compiled
pyspark again, 0.8 s of CPU each (`import pyspark.daemon`: 0.33 s from
site-packages, 1.16 s from the zip).

This rewrites each zip with, beside every `x.py`, an `x.pyc` compiled from
it: an unchecked hash-based pyc (PEP 552), which zipimport takes without
comparing timestamps (a zip entry's time is local time, two-second grained).
The new zip replaces the old by rename, never in place: uv hard-links installed
files to its cache, which other environments share. Run again after pyspark
is reinstalled (`make` does, with the install); a zip that already holds
bytecode is left as it is.

    python tools/pyspark_zip_bytecode.py [SITE_PACKAGES_PYSPARK_DIR]
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path


def pyc(source: bytes, name: str) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's own SyntaxWarnings: not ours to print
        code = compile(source, name, "exec", dont_inherit=True)
    flags = 0b01  # hash-based, unchecked
    return (
        importlib.util.MAGIC_NUMBER
        + flags.to_bytes(4, "little")
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def compiled(name: str) -> bool:
    # pyspark's own test modules (a third of the zip) are never imported by a worker;
    # each entry more is one more for zipimport to read from the zip's directory.
    return name.endswith(".py") and "/tests/" not in name


def add_bytecode(path: Path) -> int:
    """Rewrite the zip at `path` with a .pyc beside each .py; how many were added."""
    with zipfile.ZipFile(path) as old:
        names = set(old.namelist())
        if any(n.endswith(".pyc") for n in names):
            return 0
        fd, tmp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
        os.close(fd)
        added = 0
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as new:
                for info in old.infolist():
                    data = old.read(info)
                    new.writestr(info, data)
                    if compiled(info.filename) and info.filename + "c" not in names:
                        # The name tracebacks show: the source's path inside the zip.
                        code = pyc(data, f"{path}/{info.filename}")
                        new.writestr(zipfile.ZipInfo(info.filename + "c", info.date_time), code)
                        added += 1
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
            os.replace(tmp, path)  # a new inode: the cache's hard-linked copy stays as it was
        except BaseException:
            os.unlink(tmp)
            raise
    return added


def main(argv: list[str]) -> None:
    if argv:
        home = Path(argv[0])
    else:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or spec.origin is None:
            return  # no pyspark here: nothing to do
        home = Path(spec.origin).parent
    for zipped in sorted((home / "python" / "lib").glob("*.zip")):
        added = add_bytecode(zipped)
        print(f"{zipped}: {added} modules compiled" if added else f"{zipped}: has bytecode already")


if __name__ == "__main__":
    main(sys.argv[1:])
