from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"

    def ready(self):
        from django.contrib.auth.signals import user_logged_out
        from django.db.models.signals import post_save

        from workspaces import login
        from workspaces.models import User

        user_logged_out.connect(login.end_live_sockets_of_session, dispatch_uid="live-logout")
        post_save.connect(login.end_live_sockets_of_inactive, sender=User, dispatch_uid="live-off")
