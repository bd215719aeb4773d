"""One env-driven settings module. Production values come from the environment."""

import json
import os
import secrets
import sys
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGNTCHAT_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def dev_secret_key() -> str:
    """A secret generated once per checkout and kept under ./var, so sessions survive restarts."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


# Django's debug pages list every URL pattern and show settings and tracebacks: only when asked.
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY") or dev_secret_key()
# Retired secret keys (comma-separated), still accepted: rotating SECRET_KEY keeps sessions and
# stored token hashes valid while the old key is listed here (docs/operations.md).
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", "")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# Served over HTTPS (directly or behind a TLS proxy): redirects to it, secure cookies, HSTS. On
# once the site answers to a real host name; off while it answers only locally (make run, tests).
LOCAL_HOSTS = {"127.0.0.1", "localhost", "testserver", "[::1]"}
HTTPS = env_bool("HTTPS", not set(ALLOWED_HOSTS) <= LOCAL_HOSTS)
# daphne serves /static/ itself unless a proxy in front of it does (SERVE_STATIC=0).
SERVE_STATIC = env_bool("SERVE_STATIC", True)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "django_q",
    "agntchat.core",
    "workspaces",
    "agents",
    "conversations",
    "artifacts",
    "work",
    "routines",
    "integrations",
    "fronts",
    "agntchat.ui",
]

MIDDLEWARE = [
    "agntchat.core.metrics.ServerErrorMetrics",  # first: it sees every response
    "django.middleware.security.SecurityMiddleware",
    "agntchat.core.headers.security_headers",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agntchat.urls"
ASGI_APPLICATION = "agntchat.asgi.application"
AUTH_USER_MODEL = "workspaces.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL only. The embedded launcher (agntchat/core/embedded.py) sets DATABASE_URL when
# none is given, so every path below sees a real server.
DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agntchat")
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
if not _db["ENGINE"].endswith("postgresql"):
    raise RuntimeError("agntchat runs on PostgreSQL only: DATABASE_URL must be postgres://…")
_db.setdefault("OPTIONS", {})
# Session settings for every connection, after any given in DATABASE_URL. Random reads cost
# about what sequential ones do on SSDs and cached data; at PostgreSQL's 4.0 (spinning disks) the
# planner would rather scan all of a workspace's conversations than look up the few the sidebar
# lists by key (tests/conversations/test_read_plans.py).
# Threads that each hold a pooled database connection while they work, in each web process:
# HTTP requests side by side (core/http.py), the agent sockets' claims, acks and tool calls
# (work/consumers.py), and memory's background reads (work/memory.py); the pool's default size
# (DB_POOL_MAX) fits them all, with two to spare (Django's one sync thread, a migration).
HTTP_THREADS = env_int("HTTP_THREADS", 8)
SOCKET_THREADS = env_int("SOCKET_THREADS", min(8, (os.cpu_count() or 1) + 4))
MEMORY_THREADS = 4
DB_THREADS = HTTP_THREADS + SOCKET_THREADS + MEMORY_THREADS + 2
_session = [_db["OPTIONS"].get("options", ""), "-c random_page_cost=1.1"]
if os.environ.get("DB_POOLER") == "transaction":
    # A transaction pooler (PgBouncer) hands each transaction to any server connection:
    # server-side prepared statements would leak between clients (PgBouncer before 1.21 does not
    # track them), named cursors outlive the transaction that opened them (.iterator()), and our
    # own pool is redundant. What else the pooler breaks and how it is avoided (session settings,
    # session-level advisory locks, LISTEN): docs/operations.md, "PgBouncer".
    _db["OPTIONS"]["prepare_threshold"] = None
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
    if sys.argv[1:2] == ["qcluster"]:
        # Each worker keeps its client connection to the pooler (it polls every half second);
        # the pooler lends it a server connection per transaction only.
        _db["CONN_MAX_AGE"] = 60
        _db["CONN_HEALTH_CHECKS"] = True
elif sys.argv[1:2] == ["qcluster"]:
    # django-q2 forks its workers after settings load: a pool created before the fork would
    # be shared by every child (django-q2#209). Workers keep one plain connection each.
    _db["CONN_MAX_AGE"] = 60
    _db["CONN_HEALTH_CHECKS"] = True
else:
    # Under ASGI each request runs in a fresh thread: persistent per-thread connections
    # exhaust PostgreSQL, a shared pool does not. Pooled connections live long, so the hot
    # statements are bound server-side and prepared after a few runs: PostgreSQL parses and
    # plans the many-join payload and access queries once per connection, not on every message.
    # After a few runs PostgreSQL may settle on a generic plan, which knows no parameter value:
    # a statement whose best plan would depend on one must be written so that it does not (the
    # claim's LIMIT: core/claims.py; tests/test_claim_plans.py and
    # tests/conversations/test_read_plans.py check the plans under both modes).
    # DB_PREPARE_THRESHOLD set empty turns preparing off (e.g. while migrating a live system).
    _db["OPTIONS"]["server_side_binding"] = True
    _prepare = os.environ.get("DB_PREPARE_THRESHOLD", "5").strip()
    _db["OPTIONS"]["prepare_threshold"] = int(_prepare) if _prepare else None
    _db["OPTIONS"]["pool"] = {
        "min_size": env_int("DB_POOL_MIN", 2),
        "max_size": env_int("DB_POOL_MAX", DB_THREADS),
        "timeout": 10,
    }
# A transaction pooler refuses startup options: behind one, its administrator sets them.
if os.environ.get("DB_POOLER") != "transaction":
    _db["OPTIONS"]["options"] = " ".join(filter(None, _session))
DATABASES = {"default": _db}
# Of the threads that claim and ack the agent sockets' work (SOCKET_THREADS), at most this many
# run tool calls at once (work/consumers.py): the rest stay free for the sockets' work while
# slow tools run. Keep it below SOCKET_THREADS.
TOOL_THREADS = env_int("TOOL_THREADS", 4)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# Keys of this deployment share one prefix so tests and several checkouts can share a server;
# each pytest-xdist worker (and the servers its tests start) gets its own.
REDIS_PREFIX = os.environ.get("REDIS_PREFIX", "agntchat") + os.environ.get(
    "PYTEST_XDIST_WORKER", ""
)
CHANNEL_LAYERS = {
    "default": {
        # channels_redis' pub/sub layer (core/channel_layer.py): a group event is one PUBLISH,
        # fanned out to a process's sockets in memory.
        "BACKEND": "agntchat.core.channel_layer.PubSubChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": REDIS_URL,
                    # A PING on the subscribing connection when it has been quiet this long, so
                    # a connection lost without a close (a network partition) is found and
                    # opened again.
                    "health_check_interval": 15,
                    "socket_timeout": 15,
                }
            ],
            "prefix": f"{REDIS_PREFIX}:asgi:",
        },
    }
}

Q_CLUSTER = {
    "name": "agntchat",
    "orm": "default",  # the ORM broker keeps jobs durable in PostgreSQL
    "workers": env_int("Q_WORKERS", 2),
    "timeout": 300,
    "retry": 360,
    "catch_up": False,
    "poll": 0.5,
    "label": "Jobs",
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "agents.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["agntchat.core.api.CamelCaseRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agntchat.core.api.CamelCaseParser"],
    "EXCEPTION_HANDLER": "agntchat.core.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "agntchat.core.schema.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "agntchat API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "CAMELIZE_NAMES": True,
    # Two choice sets share the field name "decision": a standing permission's, and a person's
    # answer to a permission request. Named here so the schema (and check --deploy) is clean.
    "ENUM_NAME_OVERRIDES": {
        "ToolDecisionEnum": "work.models.Decision",
        "ApprovalDecisionEnum": ["approve", "deny"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "drf_spectacular.contrib.djangorestframework_camel_case.camelize_serializer_fields",
    ],
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

# ---- Email: the notification digest (workspaces.notifications.send_digests) ----
# SMTP when EMAIL_HOST is set (EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS);
# otherwise digests are written to the worker's log by the console backend.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "agntchat <noreply@localhost>")
# Links in emails point at AGNTCHAT_URL (below): the site as people reach it.

# Files attached to messages (INT-4, docs/files.md). On local disk under MEDIA_ROOT; in an
# S3-compatible bucket when AWS_STORAGE_BUCKET_NAME is set (needs django-storages[s3]; the
# credentials come from the usual AWS_* environment, docs/files.md). Never served
# as MEDIA_URL: only through signed, expiring links (conversations/files.py).
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT", VAR_DIR / "media"))
AWS_STORAGE_BUCKET_NAME = os.environ.get("AWS_STORAGE_BUCKET_NAME", "")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
if AWS_STORAGE_BUCKET_NAME:
    STORAGES["default"] = {"BACKEND": "storages.backends.s3.S3Storage"}
    AWS_QUERYSTRING_AUTH = True  # the bucket stays private: its URLs are presigned
    # Another S3-compatible service (MinIO, R2…): its endpoint, region and addressing style.
    AWS_S3_ENDPOINT_URL = os.environ.get("AWS_S3_ENDPOINT_URL") or None
    AWS_S3_REGION_NAME = os.environ.get("AWS_S3_REGION_NAME") or None
    AWS_S3_ADDRESSING_STYLE = os.environ.get("AWS_S3_ADDRESSING_STYLE") or None
    AWS_S3_SIGNATURE_VERSION = "s3v4"  # what every region and S3-compatible service accepts
    AWS_QUERYSTRING_EXPIRE = env_int("FILE_URL_MAX_AGE", 60 * 60)
FILE_UPLOAD_MAX_SIZE = env_int("FILE_UPLOAD_MAX_SIZE", 25 * 1024 * 1024)  # bytes
# How long a download link works, in seconds.
FILE_URL_MAX_AGE = env_int("FILE_URL_MAX_AGE", 60 * 60)
# An upload never posted with a message is deleted after this many hours.
FILE_UNPOSTED_HOURS = env_int("FILE_UNPOSTED_HOURS", 24)
# What may be uploaded, by extension (the type is read from the name, never from the client).
# No SVG or HTML: a browser would run their scripts.
FILE_UPLOAD_EXTENSIONS = env_list(
    "FILE_UPLOAD_EXTENSIONS",
    "png,jpg,jpeg,gif,webp,pdf,txt,md,csv,json,zip,docx,xlsx,pptx,odt,ods",
)

# Encryption keys for stored secrets (comma-separated Fernet keys, newest first).
FERNET_KEYS = env_list("FERNET_KEYS", "")

# OAuth connections (INT-1): an app registered at each provider, with its redirect URL set to
# https://<host>/oauth/<provider>/callback. A provider without a client id is not offered.
OAUTH_PROVIDERS = {
    "google": {
        "client_id": os.environ.get("GOOGLE_CLIENT_ID", ""),
        "client_secret": os.environ.get("GOOGLE_CLIENT_SECRET", ""),
        "authorize_url": "https://accounts.google.com/o/oauth2/v2/auth",
        "token_url": "https://oauth2.googleapis.com/token",
        "revoke_url": "https://oauth2.googleapis.com/revoke",
        "account_url": "https://openidconnect.googleapis.com/v1/userinfo",
        "scopes": [
            "openid",
            "email",
            "https://www.googleapis.com/auth/gmail.modify",
            "https://www.googleapis.com/auth/calendar",
            "https://www.googleapis.com/auth/drive",
        ],
        # A refresh token, asked for again on each consent (Google gives one only then).
        "authorize_params": {"access_type": "offline", "prompt": "consent"},
    },
    "github": {
        "client_id": os.environ.get("GITHUB_CLIENT_ID", ""),
        "client_secret": os.environ.get("GITHUB_CLIENT_SECRET", ""),
        "authorize_url": "https://github.com/login/oauth/authorize",
        "token_url": "https://github.com/login/oauth/access_token",
        # GitHub revokes with DELETE /applications/{client_id}/grant (basic auth), not RFC 7009.
        "revoke_url": "https://api.github.com/applications/{client_id}/grant",
        "account_url": "https://api.github.com/user",
        "scopes": ["repo"],
        "authorize_params": {},
    },
}
# Entries replaced from the environment, as JSON ({"github": {"authorize_url": …}}): a GitHub
# Enterprise host, or a local stand-in provider.
for _provider, _entry in json.loads(os.environ.get("OAUTH_PROVIDERS_JSON") or "{}").items():
    OAUTH_PROVIDERS[_provider] = {**OAUTH_PROVIDERS.get(_provider, {}), **_entry}
# A token this close to its expiry is refreshed before it is used.
OAUTH_REFRESH_MARGIN_SECONDS = env_int("OAUTH_REFRESH_MARGIN_SECONDS", 120)
# Where the Google and GitHub tools send their requests. GOOGLE_API_BASE empty: each Google
# API at its own host; set (a test's stand-in), one base URL for all of them.
GOOGLE_API_BASE = os.environ.get("GOOGLE_API_BASE", "").rstrip("/")
GITHUB_API_BASE = os.environ.get("GITHUB_API_BASE", "https://api.github.com").rstrip("/")
# Telegram as an outside channel (docs/telegram.md): the Bot API's base URL (a test's stand-in,
# or a local Bot API server); the public URL Telegram posts updates to (unset: no webhook, the
# ``telegram_poll`` command asks for them); how long a link code stays good.
TELEGRAM_API_BASE = os.environ.get("TELEGRAM_API_BASE", "https://api.telegram.org").rstrip("/")
TELEGRAM_WEBHOOK_BASE = os.environ.get("TELEGRAM_WEBHOOK_BASE", "").rstrip("/")
TELEGRAM_CODE_MINUTES = env_int("TELEGRAM_CODE_MINUTES", 15)

# Hosts (AGT-3…6): the URL their bridges reach this server at; the bridge wheel to install
# there (unset: built from this checkout's bridge/); how long a rolling restart waits for
# each bridge to be back.
AGNTCHAT_URL = os.environ.get("AGNTCHAT_URL", "http://127.0.0.1:8000").rstrip("/")
BRIDGE_WHEEL = os.environ.get("BRIDGE_WHEEL", "")
HOST_RESTART_TIMEOUT_SECONDS = env_int("HOST_RESTART_TIMEOUT_SECONDS", 120)
# Anyone may make a workspace and register hosts: each is SSH work on the shared job workers.
HOSTS_PER_WORKSPACE = env_int("HOSTS_PER_WORKSPACE", 20)
# Places one person's agents may take on agntchat's shared hosts (no workspace), all together.
SHARED_HOST_PLACES_PER_PERSON = env_int("SHARED_HOST_PLACES_PER_PERSON", 3)
# Frames a host socket (a supervisor: heartbeats) may send; beyond them a rate_limited error.
HOST_FRAMES_PER_MINUTE = env_int("HOST_FRAMES_PER_MINUTE", 60)
HOST_FRAMES_BURST = env_int("HOST_FRAMES_BURST", 20)
# Host sockets refused for a bad token, per client address, before the address is locked out
# of them for a while (LOGIN_FAILURE_WINDOW, LOGIN_LOCK_SECONDS…, as for agent keys).
HOST_SOCKET_FAILURES_PER_ADDRESS = env_int("HOST_SOCKET_FAILURES_PER_ADDRESS", 20)

# The agent pipeline.
AGENT_SESSION_TTL = env_int("AGENT_SESSION_TTL", 15 * 60)
CLAIM_LEASE_SECONDS = env_int("CLAIM_LEASE_SECONDS", 60)
# Claims of one item, after which the next gives up on it, saying so: an item that fails its
# bridge every time (a crash on what it says) would otherwise come back after every lease, and
# the model run on it again, for ever (work.gateway.claim_work).
WORK_MAX_ATTEMPTS = env_int("WORK_MAX_ATTEMPTS", 10)
PRESENCE_TTL_SECONDS = env_int("PRESENCE_TTL_SECONDS", 120)
INVITATION_TTL_DAYS = env_int("INVITATION_TTL_DAYS", 7)
# What one person or workspace may pile up (0: no limit): team workspaces a person owns, agents
# a person has, and invitation links a workspace has waiting (neither expired, used nor revoked).
TEAM_WORKSPACES_PER_PERSON = env_int("TEAM_WORKSPACES_PER_PERSON", 100)
AGENTS_PER_PERSON = env_int("AGENTS_PER_PERSON", 200)
PENDING_INVITATIONS_PER_WORKSPACE = env_int("PENDING_INVITATIONS_PER_WORKSPACE", 200)

# GET /metrics (docs/operations.md): answered to a request with "Authorization: Bearer
# <METRICS_TOKEN>", or from one of METRICS_ALLOWED_ADDRESSES (addresses or networks, e.g.
# 10.0.0.0/8); to anyone else it does not exist (404). By default only loopback in DEBUG.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
METRICS_ALLOWED_ADDRESSES = env_list("METRICS_ALLOWED_ADDRESSES", "127.0.0.1,::1" if DEBUG else "")
# The staff health page (/staff/health/): a schedule this many seconds past its run, or a job
# queued this long, means the worker is not keeping up (or not running).
HEALTH_WORKER_GRACE_SECONDS = env_int("HEALTH_WORKER_GRACE_SECONDS", 120)

# The web_fetch tool refuses private, loopback, link-local, multicast and reserved addresses,
# so an agent cannot reach the server's own network; an operator may allow them (a local
# deployment fetching its intranet, tests against a local server).
WEB_FETCH_ALLOW_PRIVATE = env_bool("WEB_FETCH_ALLOW_PRIVATE", False)
# How long a turn waits for its background memory (family layer, workspace knowledge) before
# going on without it (MEM-1).
MEMORY_BUDGET_MS = int(os.environ.get("MEMORY_BUDGET_MS", "300"))

# Password sign-in throttling (workspaces/login.py, in Redis): this many failures within the
# window lock a username from one client address (…_PER_USERNAME), an address (…_PER_ADDRESS)
# or a username from every address it has not signed in from in LOGIN_KNOWN_ADDRESS_DAYS
# (…_ANYWHERE), for LOGIN_LOCK_SECONDS, twice as long for each further lock within a day, up to
# LOGIN_LOCK_MAX_SECONDS. A client address is where the connection comes from: behind a proxy,
# run daphne with --proxy-headers.
LOGIN_FAILURES_PER_USERNAME = env_int("LOGIN_FAILURES_PER_USERNAME", 5)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 20)
LOGIN_FAILURES_PER_USERNAME_ANYWHERE = env_int("LOGIN_FAILURES_PER_USERNAME_ANYWHERE", 50)
LOGIN_KNOWN_ADDRESS_DAYS = env_int("LOGIN_KNOWN_ADDRESS_DAYS", 90)
LOGIN_FAILURE_WINDOW = env_int("LOGIN_FAILURE_WINDOW", 15 * 60)
LOGIN_LOCK_SECONDS = env_int("LOGIN_LOCK_SECONDS", 60)
LOGIN_LOCK_MAX_SECONDS = env_int("LOGIN_LOCK_MAX_SECONDS", 60 * 60)

# Rate limits (agntchat/core/throttle.py, in Redis, shared by every node; 0 turns one off). Each
# is an average per minute with a burst allowed at once; over it, REST answers 429 rate_limited
# with Retry-After. Sign-ins that succeed: API tokens issued per person and per client address;
# agent key → session exchanges per key and per client address.
TOKENS_PER_MINUTE = env_int("TOKENS_PER_MINUTE", 10)
TOKENS_BURST = env_int("TOKENS_BURST", 10)
TOKENS_PER_MINUTE_PER_ADDRESS = env_int("TOKENS_PER_MINUTE_PER_ADDRESS", 60)
AGENT_SESSIONS_PER_MINUTE = env_int("AGENT_SESSIONS_PER_MINUTE", 30)
AGENT_SESSIONS_BURST = env_int("AGENT_SESSIONS_BURST", 30)
AGENT_SESSIONS_PER_MINUTE_PER_ADDRESS = env_int("AGENT_SESSIONS_PER_MINUTE_PER_ADDRESS", 300)
# A failed key exchange counts like a failed sign-in, per client address: locked for a while.
AGENT_KEY_FAILURES_PER_ADDRESS = env_int("AGENT_KEY_FAILURES_PER_ADDRESS", 20)
# Messages posted, per person and per agent, whatever the way in (page, REST, socket, MCP).
PERSON_POSTS_PER_MINUTE = env_int("PERSON_POSTS_PER_MINUTE", 120)
PERSON_POSTS_BURST = env_int("PERSON_POSTS_BURST", 300)
AGENT_POSTS_PER_MINUTE = env_int("AGENT_POSTS_PER_MINUTE", 1200)
AGENT_POSTS_BURST = env_int("AGENT_POSTS_BURST", 600)
# Tasks a person gives, whatever the way in (REST, a delegation, MCP): each wakes an agent and
# is queued for it. And how many queued tasks an agent holds from people other than its owner
# (and their agents): past it theirs are refused, 409 task_queue_full; the owner's never are
# (0: no cap).
TASKS_PER_MINUTE = env_int("TASKS_PER_MINUTE", 30)
TASKS_BURST = env_int("TASKS_BURST", 60)
QUEUED_TASKS_FROM_OTHERS = env_int("QUEUED_TASKS_FROM_OTHERS", 50)
# Reactions a person toggles, each a live event to everyone reading the conversation.
REACTIONS_PER_MINUTE = env_int("REACTIONS_PER_MINUTE", 60)
REACTIONS_BURST = env_int("REACTIONS_BURST", 30)
# Stops a person presses (each a read, a Redis write and a publish to the agent's sockets).
STOPS_PER_MINUTE = env_int("STOPS_PER_MINUTE", 60)
STOPS_BURST = env_int("STOPS_BURST", 30)
# Searches per person and per agent, whatever the way in (page, REST, workspace_search): each
# ranks every match of its words, seconds for a common word in a big workspace.
SEARCHES_PER_MINUTE = env_int("SEARCHES_PER_MINUTE", 30)
SEARCHES_BURST = env_int("SEARCHES_BURST", 20)
# Sign-ups per client address, and verification emails a person may ask for and an email
# address may be sent, per hour.
SIGNUPS_PER_HOUR_PER_ADDRESS = env_int("SIGNUPS_PER_HOUR_PER_ADDRESS", 20)
VERIFICATION_EMAILS_PER_HOUR = env_int("VERIFICATION_EMAILS_PER_HOUR", 5)
VERIFICATION_EMAILS_PER_HOUR_PER_RECIPIENT = env_int(
    "VERIFICATION_EMAILS_PER_HOUR_PER_RECIPIENT", 3
)
# Workspace archives an owner downloads (each copies the workspace to disk).
EXPORTS_PER_HOUR = env_int("EXPORTS_PER_HOUR", 6)
EXPORTS_BURST = env_int("EXPORTS_BURST", 2)
# File uploads, in megabytes per uploader (person or agent), each upload counting its size.
UPLOAD_MB_PER_HOUR = env_int("UPLOAD_MB_PER_HOUR", 500)
UPLOAD_MB_BURST = env_int("UPLOAD_MB_BURST", 200)
# Frames one socket may send (counted in the process that holds it): browser sockets (typing
# beyond the limit is dropped quietly) and agent sockets (acks and heartbeats included).
BROWSER_FRAMES_PER_MINUTE = env_int("BROWSER_FRAMES_PER_MINUTE", 120)
BROWSER_FRAMES_BURST = env_int("BROWSER_FRAMES_BURST", 30)
# What every other member sees of it: typing announcements per person, over all their sockets
# and every node (Redis); beyond it they are dropped quietly. A page sends one per 3 s at most.
TYPING_PER_MINUTE = env_int("TYPING_PER_MINUTE", 60)
TYPING_BURST = env_int("TYPING_BURST", 10)
AGENT_FRAMES_PER_MINUTE = env_int("AGENT_FRAMES_PER_MINUTE", 60_000)
AGENT_FRAMES_BURST = env_int("AGENT_FRAMES_BURST", 5000)
# A call through a front whose work no bridge has taken by then (its agent is offline) is
# answered with an error saying so, rather than waited on for ever: an MCP tools/call's task is
# cancelled (fronts/mcp.py); an OpenAI-style completion answers 503, its message kept (openai.py).
FRONT_START_SECONDS = env_int("FRONT_START_SECONDS", 120)
# Live MCP sessions (handshake era, kept in Redis) per person; a new one past it ends the one
# used least lately (fronts/mcp.py). A tools/call counts as a task (TASKS_PER_MINUTE).
MCP_SESSIONS_PER_PERSON = env_int("MCP_SESSIONS_PER_PERSON", 20)
# A socket whose client leaves this much unread is dropped (core/sockets.py): frames waiting
# for a client that stopped reading are held in the node's memory.
WEBSOCKET_MAX_UNSENT_BYTES = env_int("WEBSOCKET_MAX_UNSENT_BYTES", 4 * 1024 * 1024)
# A request whose headers are not all in this long after its first line is answered 408 and
# closed (core/http.py): a client sending them a byte at a time would hold its connection.
HTTP_HEADERS_SECONDS = env_int("HTTP_HEADERS_SECONDS", 20)
# Open agent sockets per agent, over every node; the next one is refused (close code 4429).
AGENT_MAX_CONNECTIONS = env_int("AGENT_MAX_CONNECTIONS", 20)
# Whether a workspace's own hosts may be at private, local or reserved addresses (work/hosting.py).
# Off: anyone can make a workspace and register a host, and must not reach the server's network
# through it. On for a deployment whose workspaces' machines are on its own private network.
HOSTS_ALLOW_PRIVATE = env_bool("HOSTS_ALLOW_PRIVATE", False)
# Open browser sockets per person, over every node (tabs and devices); the next is refused
# (4429). Each holds a node's memory and a share of every event of the person's workspaces.
BROWSER_MAX_CONNECTIONS = env_int("BROWSER_MAX_CONNECTIONS", 50)

if HTTPS:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True

# Logs (docs/operations.md): JSON lines in production, text for a person in development;
# LOG_FORMAT (json or text) decides otherwise. Every record carries its fields and the trace id.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text" if DEBUG else "json").strip().lower()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "agntchat.core.logs.JsonFormatter"},
        "text": {"()": "agntchat.core.logs.TextFormatter"},
    },
    "filters": {"trace": {"()": "agntchat.core.logs.TraceFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "text" if LOG_FORMAT == "text" else "json",
            "filters": ["trace"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # httpx logs each request's URL at INFO (web_fetch's, an outside API's): a URL can
        # carry a secret. Warnings and errors still show.
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},  # the anthropic SDK's
        "httpcore": {"level": "WARNING"},
    },
}
