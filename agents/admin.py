from django.contrib import admin

from agents.models import Agent, AgentKey


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "handle", "owner", "backend", "visibility", "created_at")
    search_fields = ("name", "handle", "owner__username")


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin):
    list_display = ("agent", "name", "prefix", "created_at", "revoked_at")
    readonly_fields = ("prefix", "key_hash")
