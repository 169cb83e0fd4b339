"""The review page's server: uvicorn on a loopback port, until Ctrl-C.

The socket is bound here first (port 0: a free one), so the address with its token is known, and
said, before the first request can come; uvicorn then serves on it. Uvicorn's own handlers only note
a Ctrl-C or SIGTERM and stop the loop; once it has stopped, the signal is raised again for the
command to report (exit 130).
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable

import uvicorn

from ..core.errors import UsageError
from ..cropreview.session import ReviewSession
from .app import review_app

HOST = "127.0.0.1"


def serve(
    session: ReviewSession, port: int, ready: Callable[[str], None], stopped: Callable[[], bool] = lambda: False
) -> None:
    """Serve the review of ``session`` on ``port`` of the loopback address (0: a free one) until
    Ctrl-C; ``ready`` is given the page's address, token included, once uvicorn listens and takes
    Ctrl-C itself. ``stopped()`` says whether a Ctrl-C came before that: then it stops at once."""
    listening = _listen(port)
    token = secrets.token_urlsafe(24)
    bound = listening.getsockname()[1]
    config = uvicorn.Config(
        review_app(session, token, bound),
        log_level="critical",  # a bad request is answered, never logged: nothing but the address is printed
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        timeout_graceful_shutdown=2,
    )
    _Server(config, lambda: ready(f"http://{HOST}:{bound}/{token}/"), stopped).run(sockets=[listening])


class _Server(uvicorn.Server):
    """uvicorn's server that says it is ready once it has started, its signal handlers in place."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], None], stopped: Callable[[], bool]) -> None:
        super().__init__(config)
        self.ready = ready
        self.stopped = stopped

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.stopped():
            self.should_exit = True
        else:
            self.ready()


def _listen(port: int) -> socket.socket:
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listening.bind((HOST, port))
        listening.listen(64)
    except OSError as exc:
        listening.close()
        raise UsageError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}", code="port_unavailable") from None
    return listening
