"""Read-only: conversations and messages change only through their actions (post_message and the
rest), which keep deliveries, turns and live events in step."""

from django.contrib import admin

from conversations.models import Conversation, Message


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Conversation)
class ConversationAdmin(ReadOnly):
    list_display = ("title", "kind", "workspace", "last_message_at")
    list_filter = ("kind",)


@admin.register(Message)
class MessageAdmin(ReadOnly):
    list_display = ("conversation", "kind", "author_user", "author_agent", "created_at")
