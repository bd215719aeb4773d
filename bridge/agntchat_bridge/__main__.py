"""``agntchat-bridge``: run one agent's bridge. Configured by flags or the environment."""

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from . import logs
from .runtime import Bridge, Config


def parse(argv=None) -> Config:
    parser = argparse.ArgumentParser(prog="agntchat-bridge", description=__doc__)
    parser.add_argument(
        "--url",
        default=os.environ.get("AGNTCHAT_URL", "http://127.0.0.1:8000"),
        help="agntchat server URL (env AGNTCHAT_URL)",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("AGNTCHAT_AGENT_KEY", ""),
        help="the agent key agk_… (env AGNTCHAT_AGENT_KEY)",
    )
    parser.add_argument(
        "--key-file",
        default=os.environ.get("AGNTCHAT_AGENT_KEY_FILE", ""),
        help="read the agent key from this file instead (env AGNTCHAT_AGENT_KEY_FILE)",
    )
    parser.add_argument(
        "--workdir",
        default=os.environ.get("AGNTCHAT_WORKDIR", str(Path.home() / ".agntchat" / "agents")),
        help="where each agent gets its private working directory (env AGNTCHAT_WORKDIR)",
    )
    parser.add_argument(
        "--chat-lanes", type=int, default=int(os.environ.get("AGNTCHAT_CHAT_LANES", 2))
    )
    parser.add_argument(
        "--task-lanes", type=int, default=int(os.environ.get("AGNTCHAT_TASK_LANES", 1))
    )
    parser.add_argument(
        "--backend-options",
        default=os.environ.get("AGNTCHAT_BACKEND_OPTIONS", "{}"),
        help="JSON options for the backend, e.g. '{\"delay_ms\": 500}'",
    )
    parser.add_argument(
        "--backend-options-file",
        default=os.environ.get("AGNTCHAT_BACKEND_OPTIONS_FILE", ""),
        help="read the backend's JSON options from this file instead (e.g. a scripted table)",
    )
    args = parser.parse_args(argv)
    if args.backend_options_file:
        try:
            args.backend_options = Path(args.backend_options_file).read_text()
        except OSError as exc:
            parser.error(f"cannot read the backend options file: {exc}")
    if args.key_file and not args.key:
        try:
            args.key = Path(args.key_file).read_text().strip()
        except OSError as exc:
            parser.error(f"cannot read the key file: {exc}")
    # On a host, the agent's placement token (aht_…) stands in for the key (WS-4).
    if not args.key.startswith(("agk_", "aht_")):
        parser.error("an agent key (agk_…) is required: --key or AGNTCHAT_AGENT_KEY")
    try:
        options = json.loads(args.backend_options)
    except ValueError:
        parser.error("--backend-options must be JSON")
    return Config(
        url=args.url.rstrip("/"),
        key=args.key,
        workdir=Path(args.workdir),
        chat_lanes=args.chat_lanes,
        task_lanes=args.task_lanes,
        backend_options=options,
    )


async def amain(config: Config) -> None:
    bridge = Bridge(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, lambda: asyncio.ensure_future(bridge.stop()))
    await bridge.run_forever()


# httpx2: the HTTP client of the newer anthropic SDK.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "mcp", "uvicorn.access")


def main(argv=None) -> None:
    logs.configure()  # text, or JSON lines with LOG_FORMAT=json
    # The HTTP clients log every request's URL at INFO: a URL can carry a secret, and a turn
    # makes many requests. Their warnings and errors still show.
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    asyncio.run(amain(parse(argv)))
    sys.exit(0)


if __name__ == "__main__":
    main()
