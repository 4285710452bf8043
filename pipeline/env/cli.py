"""The `ehrgym serve` command: open a release on its source and serve the episode API over HTTP."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Annotated

import typer


def _cap_memory(gigabytes: float) -> None:
    """A process-wide address-space ceiling: a query that escapes DuckDB's memory_limit fails instead of the host."""
    if gigabytes > 0:
        limit = int(gigabytes * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def serve_command(
    release: Annotated[Path, typer.Argument(help="release folder (with manifest.json)")],
    db: Annotated[
        Path | None,
        typer.Option(help="the source DuckDB the release was built on (default: the path its manifest recorded)"),
    ] = None,
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    max_memory_gb: Annotated[float, typer.Option(help="address-space ceiling of the server (0: none)")] = 8.0,
) -> None:
    """Serve a release's episodes (GET /tasks, POST /episodes, POST /episodes/{id}/step) for remote agents."""
    import uvicorn

    from pipeline.env.release import Release, ReleaseError
    from pipeline.env.server import create_app

    try:  # agent SQL in a child process under its own address-space ceiling: a crash costs a restart
        opened = Release.open(release, db, isolate=True)
    except (ReleaseError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    _cap_memory(max_memory_gb)
    uvicorn.run(create_app(opened), host=host, port=port, log_level="info")
