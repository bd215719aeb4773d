import gc

from django.apps import AppConfig


def freeze_inherited_heap(**kwargs):
    """A django-q2 worker, just forked from its cluster, moves every object it inherited out of
    the collector's reach: a full collection otherwise writes to each one and so copies every
    shared page, about 70 MB per worker (docs/benchmarks.md, "Job workers' memory")."""
    gc.freeze()


class CoreConfig(AppConfig):
    name = "agntchat.core"
    label = "core"

    def ready(self):
        from django_q.signals import post_spawn

        from agntchat.core import schema  # noqa: F401  (registers the bearer auth scheme)

        post_spawn.connect(freeze_inherited_heap, dispatch_uid="freeze_inherited_heap")
