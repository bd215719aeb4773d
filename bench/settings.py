"""Settings for benchmark runs: the product's settings plus the bench-only baseline URL."""

from agntchat.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
