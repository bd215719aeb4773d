# agntchat's container image: one image for every role of the Procfile (web, worker, release,
# a bridge); compose.yaml runs the production layout with it (docs/operations.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGNTCHAT_VAR_DIR=/var/lib/agntchat \
    HOST=0.0.0.0 \
    PORT=8000

# A user of its own: the server never runs as root.
RUN groupadd --system --gid 1000 agntchat \
    && useradd --system --uid 1000 --gid agntchat --home-dir /app --shell /usr/sbin/nologin agntchat

WORKDIR /app
# Dependencies first (a layer that changes only with pyproject.toml), then the code.
COPY pyproject.toml README.md ./
COPY bridge/ ./bridge/
RUN pip install ./bridge
COPY . .
# Editable, so BASE_DIR (templates/, static/) is /app whatever imports the project.
RUN pip install -e . \
    && SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput -v0 \
    && mkdir -p /var/lib/agntchat/media \
    && chown -R agntchat:agntchat /var/lib/agntchat

USER 1000:1000
EXPOSE 8000
VOLUME ["/var/lib/agntchat/media"]
# The Procfile's web process, behind a proxy (it sets X-Forwarded-For and -Proto).
CMD ["sh", "-c", "exec daphne -b \"$HOST\" -p \"$PORT\" --proxy-headers --websocket-max-message-size 4194304 --websocket-max-frame-size 4194304 --websocket_connect_timeout 20 agntchat.asgi:application"]
