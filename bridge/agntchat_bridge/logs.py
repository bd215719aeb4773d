"""The bridge's log lines: readable text by default, JSON lines with LOG_FORMAT=json.

A record's fields (``extra``) are written beside its message: as keys of the JSON line, or as
``key=value`` after the text. Work items are logged with the ``trace`` the server sent in their
work frame (the message's id), the same id the server logs at the post, the claim and the ack,
so ``grep <message id>`` over the server's and the bridge's logs shows one message's path.
(The server has its own copy of this in agntchat/core/logs.py: the bridge imports nothing of it.)
"""

import json
import logging
import os
import time

STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def fields(record) -> dict:
    return {
        key: value
        for key, value in vars(record).items()
        if key not in STANDARD and not key.startswith("_") and value is not None
    }


class JsonFormatter(logging.Formatter):
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
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(asctime)s bridge %(levelname)s %(message)s")

    def format(self, record):
        text = super().format(record)
        extra = " ".join(f"{key}={value}" for key, value in fields(record).items())
        if not extra:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} {extra}{newline}{rest}"


def configure() -> None:
    """Root logging on stderr, in the format LOG_FORMAT names, at LOG_LEVEL."""
    handler = logging.StreamHandler()
    json_lines = os.environ.get("LOG_FORMAT", "text").strip().lower() == "json"
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), handlers=[handler])
