"""Encryption at rest for stored secrets (OAuth tokens, workspace credentials); keyed hashes of
bearer secrets."""

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import TypeVar

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings
from django.db.models import QuerySet
from django.utils.crypto import salted_hmac

T = TypeVar("T")


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


def rotate(ciphertext: str) -> str:
    """CIPHERTEXT encrypted again with the newest key (``FERNET_KEYS``' first), whichever listed
    key made it: after every stored secret is rotated, the old keys can be dropped."""
    return _fernet().rotate(ciphertext.encode()).decode()


def new_secret(prefix: str) -> str:
    """A bearer secret like ``apt_…``: the prefix says what kind of credential it is."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


# Stored bearer secrets (API tokens, agent keys and sessions, invitations) are keyed hashes. The
# key is derived from SECRET_KEY for this purpose only, so a leaked database alone cannot be
# used to test guesses, and hashes of one installation mean nothing on another.
HASH_PURPOSE = "agntchat.core.crypto.hash_secret"
# Before this, every installation keyed the hashes with this constant. Such hashes are still
# recognised, and replaced by the current one the first time their secret is used (the secrets
# are not stored, so no migration can re-hash them): see find_by_secret, docs/operations.md.
LEGACY_HASH_KEY = b"agntchat-secret"


def hash_secret(secret: str, key: str | None = None) -> str:
    """Secrets are long random strings, so one fast keyed hash is enough (no password KDF).
    Keyed from SECRET_KEY (or KEY, a retired one) salted with the purpose."""
    return salted_hmac(HASH_PURPOSE, secret, secret=key, algorithm="sha256").hexdigest()


def earlier_hashes(secret: str) -> list[str]:
    """Hashes SECRET may still be stored under: made with a retired key (SECRET_KEY_FALLBACKS)
    or with the legacy constant key."""
    return [hash_secret(secret, key) for key in settings.SECRET_KEY_FALLBACKS] + [
        hmac.new(LEGACY_HASH_KEY, secret.encode(), hashlib.sha256).hexdigest()
    ]


def find_by_secret(
    find: Callable[[str], T | None], rows: QuerySet, field: str, secret: str
) -> T | None:
    """FIND(hash) with SECRET's current hash. If that finds nothing, a row of ROWS whose FIELD
    holds an earlier hash of SECRET is re-hashed with the current key, and FIND is asked again:
    an old hash is upgraded on its first use and never looked up again."""
    current = hash_secret(secret)
    found = find(current)
    if found is None and rows.filter(**{f"{field}__in": earlier_hashes(secret)}).update(
        **{field: current}
    ):
        found = find(current)
    return found


def lookup_prefix(secret: str) -> str:
    """The first characters after the kind, stored in clear to find the row without the secret."""
    return secret[:12]
