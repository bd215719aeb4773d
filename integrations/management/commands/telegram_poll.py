"""Ask Telegram for the updates of every workspace bot that has no webhook (``getUpdates``), and
handle them: for installs without a public URL (docs/telegram.md). Runs until stopped; ``--once``
asks each bot once. The offset of each bot is stored with what its updates posted, so a restart
neither loses nor repeats one."""

import time

from django.core.management.base import BaseCommand
from django.db import close_old_connections
from telegram.error import TelegramError

from integrations import telegram


class Command(BaseCommand):
    help = "Receive Telegram updates by long polling, for bots without a webhook."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Ask each bot once, then stop.")
        parser.add_argument(
            "--timeout", type=int, default=25, help="Seconds a lone bot's getUpdates may wait."
        )

    def handle(self, *args, once=False, timeout=25, **options):
        while True:
            close_old_connections()
            bots = list(telegram.polled_bots())
            # One bot waits at Telegram for its next update; several are asked in turn.
            wait = timeout if len(bots) == 1 and not once else 0
            for bot in bots:
                try:
                    handled = telegram.poll_once(bot, timeout=wait)
                except TelegramError as exc:
                    self.stderr.write(f"{bot.username}: {exc}")
                    continue
                if handled:
                    self.stdout.write(f"{bot.username}: {handled} update(s)")
            if once:
                return
            if wait == 0:
                time.sleep(1)
