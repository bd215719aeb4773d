"""Structured logs: JSON lines in production, readable text in development, and the trace id.

Every record may carry fields beside its message (``log.info("claimed", extra={...})``): the
JSON formatter writes them as keys of the line, the text formatter as ``key=value`` after the
message. The ``trace`` field follows one message through the system: its id at the post, at the
claim, in the work frame (the bridge logs it too), at the reply and at the ack, so that
``grep <message id>`` over the web's and the bridges' logs shows the whole path
(docs/operations.md). Code that handles one message sets it for everything logged meanwhile
with ``traced(id)``; a record's own ``extra={"trace": …}`` wins.
"""

import contextlib
import contextvars
import logging
import time

import orjson

TRACE: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace", default=None)

# What every LogRecord has: anything else on a record came from ``extra``.
STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


@contextlib.contextmanager
def traced(trace):
    """Records logged inside carry TRACE (a message's id) unless they name their own."""
    token = TRACE.set(str(trace) if trace is not None else None)
    try:
        yield
    finally:
        TRACE.reset(token)


class TraceFilter(logging.Filter):
    """Puts the current trace on each record that has none (a handler's filter: every record
    the handler writes, whichever logger it came from)."""

    def filter(self, record):
        if getattr(record, "trace", None) is None:
            trace = TRACE.get()
            if trace is not None:
                record.trace = trace
        return True


def fields(record) -> dict:
    """The record's own fields (from ``extra`` and the trace), as they will be written."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in STANDARD and not key.startswith("_") and value is not None
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601 with milliseconds), level, logger, msg,
    the record's fields, and ``exc`` with the traceback when there is one."""

    def format(self, record):
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            **fields(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level logger message key=value …`` for a person reading a terminal."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record):
        text = super().format(record)
        extra = " ".join(f"{key}={value}" for key, value in fields(record).items())
        if not extra:
            return text
        # After the message, before a traceback (which super() appended on new lines).
        first, newline, rest = text.partition("\n")
        return f"{first} {extra}{newline}{rest}"
