"""Logging: every line carries the request id of the request it belongs to."""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar

REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="-")

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


def setup(debug: bool = False, access_log: bool = True) -> None:
    """Send logs to stderr in one format; quiet the chatty libraries."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    # Left at NOTSET it follows the root logger (a CLI at WARNING shows no access lines).
    logging.getLogger("acceleron.api.access").setLevel(
        logging.NOTSET if access_log else logging.WARNING
    )
    for noisy in ("uvicorn.access", "stevedore", "keystoneauth", "urllib3", "oslo_policy"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Every request to the embedded Placement (some 80 as a host is first published) and
    # alembic's every step: for --debug only. Acceleron logs what they amount to.
    for chatty in ("placement.requestlog", "alembic.runtime.migration"):
        logging.getLogger(chatty).setLevel(logging.NOTSET if debug else logging.WARNING)
