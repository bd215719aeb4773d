from django.contrib import admin

from conversations.models import Conversation, Message


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "kind", "workspace", "last_message_at")
    list_filter = ("kind",)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("conversation", "kind", "author_user", "author_agent", "created_at")
    readonly_fields = ("conversation", "author_user", "author_agent", "reply_to")
