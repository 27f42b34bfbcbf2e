"""Running the unchanged job on a cluster: which masters are remote, and shipping the ``streaming`` package and
the ``watermark_client`` package it reads the event format from.

The Python Data Source's reader (and anything else Spark pickles) is pickled
by reference, so every executor's Python worker must import ``streaming``, and with it ``watermark_client``.
In local mode the workers inherit the driver's ``PYTHONPATH``; on a cluster
each package is zipped at start and sent with ``SparkContext.addPyFile``.
"""

from __future__ import annotations

import hashlib
import io
import re
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import watermark_client

if TYPE_CHECKING:
    from pyspark import SparkContext

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the whole ``streaming`` package, not this floor
CLIENT_DIR = Path(watermark_client.__file__).resolve().parent  # the event format and the connections it reads
_LOCAL_MASTER = re.compile(r"^local(\[[^\]]*\])?$")


def is_local_master(master: str) -> bool:
    """``local`` / ``local[N]`` / ``local[*]`` / ``local[N,F]``: driver and executors share one process.
    Anything else (``spark://``, ``yarn``, ``k8s://``, ``local-cluster[...]``) runs executors elsewhere."""
    return bool(_LOCAL_MASTER.match(master.strip()))


def package_zip(package_dir: Path = PACKAGE_DIR, out_dir: Path | None = None) -> Path:
    """The package's ``.py`` files as ``{name}-{content hash}.zip``: the same code gives the same file,
    so a second session in the same process ships nothing new."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package_dir.rglob("*.py")):
            arcname = path.relative_to(package_dir.parent).as_posix()
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))  # fixed: same code, same bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    data = buf.getvalue()
    out = out_dir or Path(tempfile.gettempdir()) / "watermark-pyfiles"
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{package_dir.name}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.exists():
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)  # atomic: two drivers starting at once never ship half a zip
    return target


def ship_package(sc: SparkContext) -> list[Path]:
    """Send both packages to every executor; call before registering the data source, whose pickled
    function carries the list of shipped files."""
    shipped = []
    for package_dir in (PACKAGE_DIR, CLIENT_DIR):
        path = package_zip(package_dir)
        if path.name not in added_files(sc):
            sc.addPyFile(str(path))
        shipped.append(path)
    return shipped


def added_files(sc: SparkContext) -> set[str]:
    """The names of the files added to ``sc`` so far (``SparkContext.listFiles``: ``addPyFile`` adds its file
    there too, as a URI); a zip named by its content is shipped once."""
    return {uri.rstrip("/").rsplit("/", 1)[-1] for uri in sc.listFiles}
