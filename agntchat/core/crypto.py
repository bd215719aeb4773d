"""Encryption at rest for stored secrets (OAuth tokens, workspace credentials)."""

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings


def _fernet() -> MultiFernet:
    keys = list(settings.FERNET_KEYS)
    if not keys:
        # Derived from SECRET_KEY so a dev setup works without extra configuration; production
        # sets FERNET_KEYS (newest first) to rotate without losing old ciphertexts.
        digest = hashlib.sha256(("fernet:" + settings.SECRET_KEY).encode()).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return MultiFernet([Fernet(k) for k in keys])


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    return _fernet().decrypt(ciphertext.encode()).decode()


def new_secret(prefix: str) -> str:
    """A bearer secret like ``apt_…``: the prefix says what kind of credential it is."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def hash_secret(secret: str) -> str:
    """Secrets are long random strings, so one fast keyed hash is enough (no password KDF)."""
    return hmac.new(b"agntchat-secret", secret.encode(), hashlib.sha256).hexdigest()


def lookup_prefix(secret: str) -> str:
    """The first characters after the kind, stored in clear to find the row without the secret."""
    return secret[:12]
