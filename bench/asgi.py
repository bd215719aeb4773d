"""The ASGI application the bench's daphnes serve: the product's, less what BENCH_WITHOUT
switches off (bench/without.py)."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from agntchat.asgi import application  # noqa: E402
from bench import without  # noqa: E402

without.apply()
if "http" in without.switched_off():
    application.application_mapping["http"] = ASGIHandler()
if "gc_freeze" in without.switched_off():
    gc.unfreeze()
