"""Staff admin. The owner and personal-workspace rules hold here too (fields are read-only)."""

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin

from agntchat.core.exceptions import AppError
from workspaces import actions
from workspaces.forms import AdminLoginForm
from workspaces.models import Membership, Role, User, Workspace

# The admin's login checks passwords like every other sign-in: throttled (workspaces/login.py).
admin.site.login_form = AdminLoginForm


@admin.register(User)
class PersonAdmin(UserAdmin):
    list_display = ("username", "email", "display_name", "is_staff", "created_at")


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ("user", "role")
    readonly_fields = ("user", "role")
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "owner", "created_at")
    list_filter = ("kind",)
    search_fields = ("name", "owner__username")
    inlines = [MembershipInline]
    # Staff rename or create a workspace here; its other settings change through its pages.
    fields = ("name", "kind", "owner")

    def get_readonly_fields(self, request, obj=None):
        # The owner and the kind are fixed at creation (WS-1, WS-2).
        return ("owner", "kind") if obj else ()

    def has_delete_permission(self, request, obj=None):
        return obj is None or not obj.is_personal

    def delete_queryset(self, request, queryset):
        for workspace in queryset:
            self.delete_model(request, workspace)

    def delete_model(self, request, obj):
        try:
            actions.delete_workspace(_owners_membership(obj))
        except AppError as exc:
            messages.error(request, exc.message)

    def save_model(self, request, obj, form, change):
        # Staff act as the owner, through the owner's actions (which announce the change).
        if change:
            actions.rename_workspace(_owners_membership(obj), obj.name)
        else:
            actions.create_team_workspace(obj.owner, obj.name)


def _owners_membership(workspace: Workspace) -> Membership:
    membership = Membership.objects.select_related("workspace").get(
        workspace=workspace, role=Role.OWNER
    )
    membership.workspace = workspace  # with the name the form set
    return membership
