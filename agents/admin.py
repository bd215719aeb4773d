"""Staff read agents and keys here; agents change through their owners (page, REST). The one
change staff make is revoking a key (a leaked one), through the action that also ends its
sessions."""

from django.contrib import admin

from agents import actions
from agents.models import Agent, AgentKey


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Agent)
class AgentAdmin(ReadOnly):
    list_display = ("name", "handle", "owner", "backend", "visibility", "created_at")
    search_fields = ("name", "handle", "owner__username")


@admin.action(
    description="Revoke the selected keys (their sessions end at once)", permissions=["revoke"]
)
def revoke_keys(modeladmin, request, queryset):
    for key in queryset:
        actions.revoke_agent_key(key)


@admin.register(AgentKey)
class AgentKeyAdmin(ReadOnly):
    list_display = ("agent", "name", "prefix", "created_at", "revoked_at")
    exclude = ("key_hash",)
    actions = [revoke_keys]

    def has_revoke_permission(self, request):
        return request.user.has_perm("agents.change_agentkey")
