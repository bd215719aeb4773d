"""Encrypt every stored secret again with the newest of ``FERNET_KEYS``.

Rotating keys: put a new key first in FERNET_KEYS (keeping the old ones after it), deploy, run
this command, then drop the old keys. Until then secrets made with any listed key still read.
"""

from django.core.management.base import BaseCommand
from django.db import transaction

from agntchat.core import crypto
from integrations.models import Connection, OAuthFlow, TelegramBot
from workspaces.models import Credential

# (model, its encrypted fields)
ENCRYPTED = [
    (Connection, ["access_ciphertext", "refresh_ciphertext"]),
    (OAuthFlow, ["verifier_ciphertext"]),
    (Credential, ["ciphertext"]),
    (TelegramBot, ["token_ciphertext"]),
]


class Command(BaseCommand):
    help = "Encrypt every stored secret again with the newest key of FERNET_KEYS."

    def handle(self, *args, **options):
        for model, fields in ENCRYPTED:
            count = 0
            with transaction.atomic():
                for row in model.objects.select_for_update().only("pk", *fields).iterator():
                    for field in fields:
                        if getattr(row, field):
                            setattr(row, field, crypto.rotate(getattr(row, field)))
                    row.save(update_fields=fields)
                    count += 1
            self.stdout.write(f"{model._meta.verbose_name_plural}: {count} re-encrypted")
