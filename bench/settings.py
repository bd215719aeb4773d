"""Settings for benchmark runs: the product's settings plus the bench-only baseline URL, less
what BENCH_WITHOUT switches off (bench/without.py)."""

import os

from agntchat.settings import *  # noqa: F403
from agntchat.settings import DATABASES
from bench.without import switched_off

ROOT_URLCONF = "bench.urls"

if os.environ.get("BENCH_QCLUSTER") == "1":
    # The django-q2 peer: qcluster forks its workers after Django has set up the psycopg pool,
    # and pooled connections shared across fork get corrupted (django-q2/django-q2#209). Run
    # the peer the way it works: no pool, persistent connections in its long-lived processes.
    DATABASES["default"]["OPTIONS"].pop("pool", None)
    DATABASES["default"]["CONN_MAX_AGE"] = 600

if "prepared" in switched_off():  # Django's default: parameters bound client-side
    DATABASES["default"]["OPTIONS"].pop("server_side_binding", None)
    DATABASES["default"]["OPTIONS"].pop("prepare_threshold", None)

# A benchmark measures throughput, not abuse: limits out of reach, the counters still counted.
PERSON_POSTS_PER_MINUTE = AGENT_POSTS_PER_MINUTE = 10**9  # noqa: F405
AGENT_FRAMES_PER_MINUTE = BROWSER_FRAMES_PER_MINUTE = 10**9
# The socket bench opens every browser socket as one person (1,000 of them): its cap, far past.
BROWSER_MAX_CONNECTIONS = 10**9
# And every idle agent belongs to one person (10,000 of them): no cap on a person's agents.
AGENTS_PER_PERSON = 0
# Its sockets start beating only once all are open (opening 10,000 takes minutes), where a real
# bridge beats from the start: silent sockets are closed at three quarters of this (4408).
PRESENCE_TTL_SECONDS = 1800
