from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self):
        from django.db.models.signals import post_delete, post_save, pre_delete

        from agents import hosting, signals
        from agents.models import Host
        from workspaces.actions import workspace_closing
        from workspaces.models import Membership

        # What the workspaces app does that ends agents' places on its hosts (it cannot import
        # this app: it is below it).
        pre_delete.connect(hosting.host_going, sender=Host, dispatch_uid="host-going")
        workspace_closing.connect(hosting.workspace_closing, dispatch_uid="workspace-closing")
        post_save.connect(hosting.membership_saved, sender=Membership, dispatch_uid="ms-saved")
        post_delete.connect(hosting.membership_deleted, sender=Membership, dispatch_uid="ms-gone")
        # And where its agents stop appearing: told on to the apps above (signals).
        post_delete.connect(signals.owner_left, sender=Membership, dispatch_uid="ms-owner-left")
