"""The ASGI application the bench's daphnes serve: the product's, less what BENCH_WITHOUT
switches off (bench/without.py)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from agntchat.asgi import application  # noqa: E402
from bench import without  # noqa: E402

without.apply()
if "http" in without.switched_off():  # wrapped as agntchat/asgi.py wraps its own
    django_http = ASGIHandler()
    application.application_mapping["http"] = (
        ASGIStaticFilesHandler(django_http) if settings.SERVE_STATIC else django_http
    )
