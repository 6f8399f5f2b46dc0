"""`tidelog worker`: the push worker, from the `worker` extra."""

from __future__ import annotations

import click

from .context import Session, common_options, pass_session


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The worker configuration: a .toml file, or .json of the same structure.",
)
@click.option(
    "--engine",
    type=click.Choice(["spark", "local"]),
    help="Override the configuration's engine (default there: spark).",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus /metrics on this port.")
@click.option("--work-dir", help="Override the configuration's work_dir (Spark checkpoints).")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Structured logs (JSON lines) on stderr from this level; debug logs every batch.",
)
@common_options
@pass_session
def worker(
    session: Session,
    config_path: str,
    engine: str | None,
    metrics_port: int | None,
    work_dir: str | None,
    log_level: str,
) -> None:
    """POST batches of records to HTTP endpoints, committing after each 2xx.

    Runs until SIGTERM or SIGINT, then finishes the requests in flight,
    commits what the endpoints accepted and exits 0. A bad configuration
    exits 1 before anything is posted.
    """
    try:
        # Imported here: the worker's dependencies are an optional extra.
        import tidelog.worker as push
        from tidelog.logs import log_to_stderr
    except ImportError as e:
        raise click.ClickException(
            f"the worker is not installed ({e}): pip install 'tidelog[worker]'"
        ) from None
    log_to_stderr(log_level)
    push.run(session.url, config_path, engine=engine, metrics_port=metrics_port, work_dir=work_dir)
