"""The push worker: feeds HTTP endpoints from topics.

    tidelog.worker.run("tidelog.db", "worker.toml")            # until SIGTERM / SIGINT
    tidelog worker --config worker.toml --db tidelog.db       # the same, from the shell

For each (group, topic, partition) of the configuration it POSTs batches
of records after the group's committed offset and commits a batch only
when the endpoint answered 2xx; anything else is retried, same batch, after
`interval`. Delivery is at least once: an endpoint must be idempotent (the
topic, partition and offset name a record). See `config` for the file,
`delivery` for the body and the commit rule, `local` and `spark` for the
two engines.

Needs the `worker` extra (httpx, prometheus-client); the spark engine also
needs the `spark` extra.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from ..errors import ConfigurationError
from ..log import Log
from .config import ENGINES, SPARK_MISSING, Feed, WorkerConfig, load
from .shutdown import Shutdown

__all__ = ["Feed", "WorkerConfig", "load", "run"]


def run(
    log_or_url: Log | str,
    config: Any,
    *,
    engine: str | None = None,
    metrics_port: int | None = None,
    work_dir: str | None = None,
    stop: threading.Event | None = None,
    spark: Any = None,
    on_metrics: Any = None,
) -> None:
    """Run the worker until `stop` is set or SIGTERM / SIGINT arrives.

    `config`: a .toml or .json path, a dict of the same structure, or a
    WorkerConfig. `engine` and `work_dir` override the configuration's.
    `metrics_port` serves Prometheus `/metrics` on that port. `spark` is a
    SparkSession to run on instead of starting one (the spark engine needs
    `log_or_url` as a URL: its executors open the log themselves).
    `on_metrics(metrics)` is called with the worker's Metrics before it
    starts (for embedding and tests). Bad configuration raises
    ConfigurationError before anything is posted.
    """
    cfg = load(config)
    if engine is not None:
        if engine not in ENGINES:
            raise ConfigurationError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        cfg = replace(cfg, engine=engine)
    if work_dir is not None:
        cfg = replace(cfg, work_dir=work_dir)
    url = log_or_url if isinstance(log_or_url, str) else None
    if cfg.engine == "spark" and url is None:
        raise ConfigurationError(
            "the spark engine needs the log's URL, not a Log object: its executors open the log themselves"
        )
    try:
        from .metrics import Metrics
    except ImportError as e:
        raise ConfigurationError(f"the worker needs {e.name}: pip install 'tidelog[worker]'") from None

    import tidelog

    log = tidelog.open(url) if url is not None else log_or_url
    assert isinstance(log, Log)
    metrics = None
    shutdown = Shutdown(stop)
    try:
        cfg = cfg.resolve(log)
        metrics = Metrics(log, cfg)
        if metrics_port is not None:
            metrics.serve(metrics_port)
        if on_metrics is not None:
            on_metrics(metrics)
        if cfg.engine == "local":
            from .local import LocalEngine

            LocalEngine(log, cfg, metrics, shutdown).run()
        else:
            try:
                from .spark import SparkEngine
            except ImportError as e:
                raise ConfigurationError(f"the spark engine needs {e.name}: {SPARK_MISSING}") from None
            assert url is not None
            SparkEngine(url, log, cfg, metrics, shutdown, spark).run()
    finally:
        shutdown.close()
        if metrics is not None:
            metrics.close()
        if url is not None:
            log.close()
