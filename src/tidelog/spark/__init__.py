"""tidelog on Apache Spark: format "tidelog" for reads, streams and writes.

    spark = tidelog.spark.session()            # or your own SparkSession, then:
    tidelog.spark.register(spark)              # registers format "tidelog"
    spark.read.format("tidelog").option("url", "tidelog.db").option("subscribe", "orders").load()

Needs the `spark` extra (`pip install 'tidelog[spark]'`: pyspark >= 4.2 and
pyarrow) and Java 17 or newer for Spark itself.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

from ..errors import ConfigurationError

MIN_PYSPARK = (4, 2)
MIN_JAVA = 17
INSTALL = "pip install 'tidelog[spark]'"
MASTER_TIMEOUT_S = 5

try:
    import pyarrow  # noqa: F401
    import pyspark
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ConfigurationError(f"tidelog.spark needs {e.name}, which is not installed: {INSTALL}") from None

if tuple(int(x) for x in re.findall(r"\d+", pyspark.__version__)[:2]) < MIN_PYSPARK:  # pragma: no cover
    raise ConfigurationError(
        f"tidelog.spark needs pyspark >= {'.'.join(map(str, MIN_PYSPARK))} (admission control for Python "
        f"sources), found {pyspark.__version__}: {INSTALL}"
    )

from .source import TidelogDataSource  # noqa: E402

__all__ = ["TidelogDataSource", "check_java", "check_master", "register", "session"]


def register(spark: Any) -> None:
    """Register format "tidelog" on a SparkSession.

    Spark runs Python data sources in the interpreter named by
    `spark.pyspark.python` or `PYSPARK_PYTHON`, else `python3` from PATH,
    which may well lack tidelog. When neither is set, this makes Spark use
    the interpreter running this code (`sys.executable`), the one that
    imported tidelog; set `PYSPARK_PYTHON` yourself on a cluster whose
    executors keep Python elsewhere.
    """
    _use_python(spark)
    spark.dataSource.register(TidelogDataSource.for_master(_master(spark)))


def session(master: str = "local[2]", app_name: str = "tidelog", **conf: Any) -> Any:
    """A SparkSession with format "tidelog" registered.

    Checks for Java first (Spark needs 17 or newer) so a missing one says so
    instead of failing inside Spark's launcher. `conf` entries are Spark
    settings, e.g. `**{"spark.sql.shuffle.partitions": "2"}`.
    """
    check_java()
    check_master(master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    register(spark)
    return spark


def check_java() -> str:
    """The `java` Spark will start; ConfigurationError when missing or older than 17."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise ConfigurationError(
            f"Spark needs Java {MIN_JAVA} or newer and none was found (JAVA_HOME unset and no java on PATH): "
            f"install a JDK {MIN_JAVA}+, e.g. apt-get install openjdk-{MIN_JAVA}-jre-headless"
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise ConfigurationError(f"cannot run {java} -version: {e}") from None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = 0 if not found else int(found.group(1))
    if major == 1 and found and found.group(2):  # "1.8.0" is Java 8
        major = int(found.group(2))
    if major < MIN_JAVA:
        raise ConfigurationError(
            f"Spark needs Java {MIN_JAVA} or newer; {java} is {major or 'unknown'}: "
            f"install a JDK {MIN_JAVA}+ and point JAVA_HOME at it"
        )
    return java


def _master(spark: Any) -> str | None:
    try:
        return str(spark.sparkContext.master)
    except Exception:  # Spark Connect: the server's master is not ours to see
        return None


def check_master(master: str) -> None:
    """Refuse a `spark://` master that no host of it answers on, before a JVM starts.

    Spark itself would retry the registration for a minute and then stop
    the SparkContext with "All masters are unresponsive", leaving a session
    whose every job fails.
    """
    if not master.startswith("spark://"):
        return
    tried = []
    for hostport in master[len("spark://") :].split(","):  # spark://h1:7077,h2:7077 with standby masters
        host, _, port = hostport.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(f"master {master!r} is not spark://host:port[,host:port...]")
        try:
            socket.create_connection((host, int(port)), timeout=MASTER_TIMEOUT_S).close()
            return
        except OSError as e:
            tried.append(f"{host}:{port} ({e.strerror or e})")
    raise ConfigurationError(
        f"the Spark master {master} is not reachable: {', '.join(tried)}; start it "
        "(spark-class org.apache.spark.deploy.master.Master) or fix the master URL's host and port"
    )


def _use_python(spark: Any) -> None:
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext: its server chose Python already.
        return
    chosen = sc.getConf().get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or sys.executable
    # The Python side of a data source's registration sends sc.pythonExec to
    # Spark; it was read from PYSPARK_PYTHON (or "python3") when the context
    # started, before spark.pyspark.python or this module could weigh in.
    if chosen != sys.executable and sc.master.startswith("local"):
        try:
            ok = subprocess.run([chosen, "-c", "import tidelog.spark"], capture_output=True).returncode == 0
        except OSError:
            ok = False
        if not ok:
            raise ConfigurationError(
                f"Spark runs Python data sources with {chosen} (spark.pyspark.python / PYSPARK_PYTHON), "
                f"which cannot import tidelog.spark: install it there ({INSTALL}) or point "
                f"PYSPARK_PYTHON at {sys.executable}"
            )
    sc.pythonExec = chosen
