"""`tidelog serve`: the HTTP server, from the `server` extra."""

from __future__ import annotations

import click

from .context import Session, common_options, pass_session


@click.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless told)."
)
@click.option("--port", type=click.IntRange(0, 65535), default=7070, show_default=True)
@click.option(
    "--token",
    envvar="TIDELOG_TOKEN",
    show_envvar=True,
    help="Require 'Authorization: Bearer TOKEN' on every route but /healthz.",
)
@click.option(
    "--tls-cert", type=click.Path(exists=True, dir_okay=False), help="Serve TLS with this certificate (PEM)."
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), help="The certificate's private key (PEM)."
)
@common_options
@pass_session
def serve(
    session: Session, host: str, port: int, token: str | None, tls_cert: str | None, tls_key: str | None
) -> None:
    """Serve the log over HTTP until interrupted."""
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    try:
        # Imported here: the server's dependencies are an optional extra.
        import tidelog.server as server
    except ImportError as e:
        raise click.ClickException(
            f"the server is not installed ({e}): pip install 'tidelog[server]'"
        ) from None
    server.serve(session.url, host=host, port=port, token=token, tls_cert=tls_cert, tls_key=tls_key)
