#!/usr/bin/env python3
"""Stand-in for the claude/codex CLIs: logs its argv, replays a recorded JSONL fixture, exits.

Driven by env: FAKE_CLI_LOG (append one JSON line of argv/cwd/env/pid), FAKE_CLI_FIXTURE (lines to
print), FAKE_CLI_STDERR (printed to stderr), FAKE_CLI_EXIT (exit code), FAKE_CLI_HANG (after
printing, start a child and sleep so the caller must kill us).
"""

import json
import os
import subprocess
import sys
import time

env = os.environ
child = None
if env.get("FAKE_CLI_HANG"):
    child = subprocess.Popen(["sleep", "60"])  # a tool the CLI spawned; must die with the CLI
if env.get("FAKE_CLI_LOG"):
    record = {
        "argv": sys.argv[1:],
        "name": os.path.basename(sys.argv[0]),
        "cwd": os.getcwd(),
        "env": {
            k: env.get(k)
            for k in (
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL",
                "CODEX_API_KEY",
                "AGNTCHAT_AGENT_KEY",
                "CLAUDE_CONFIG_DIR",
                "CODEX_HOME",
            )
        },
        "pid": os.getpid(),
        "child_pid": child.pid if child else None,
    }
    with open(env["FAKE_CLI_LOG"], "a") as f:
        f.write(json.dumps(record) + "\n")
print("fake cli starting", file=sys.stderr, flush=True)
print("note: this plain-text line is not JSON", flush=True)
if env.get("FAKE_CLI_FIXTURE"):
    with open(env["FAKE_CLI_FIXTURE"]) as f:
        for line in f:
            print(line.rstrip("\n"), flush=True)
if env.get("FAKE_CLI_STDERR"):
    print(env["FAKE_CLI_STDERR"], file=sys.stderr, flush=True)
if env.get("FAKE_CLI_HANG"):
    time.sleep(60)  # a CLI that hangs: the behaviour under test is that only a kill ends it
sys.exit(int(env.get("FAKE_CLI_EXIT", "0")))
