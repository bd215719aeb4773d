"""Staff manage agntchat's hosts here (AGT-6): add one (its SSH key stored encrypted, never
shown again), provision it, restart its bridges one at a time, read the restart reports. Every
change goes through the hosting actions; the pinned host key is read-only (cleared only on
purpose, by the action of that name)."""

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html_join

from agents import hosting
from agents.admin import ReadOnly
from agents.models import Host, HostRestart
from work import hosting as work_hosting

EDITABLE = ("name", "workspace", "address", "port", "ssh_user", "multi_tenant", "capacity")


class HostForm(forms.ModelForm):
    ssh_key = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6}),
        required=False,
        help_text="The OpenSSH private key agntchat logs in with. Stored encrypted; never shown. "
        "Leave empty to keep the current one.",
    )

    class Meta:
        model = Host
        fields = (*EDITABLE, "root", "python")

    def clean_ssh_key(self):
        key = self.cleaned_data["ssh_key"].strip()
        if not key and self.instance.pk is None:
            raise forms.ValidationError("A new host needs the SSH key to log in with.")
        if key:
            try:
                work_hosting.load_key(key)
            except work_hosting.HostUnreachable as exc:
                raise forms.ValidationError(exc.message) from None
        return key


def _request_each(request, queryset, ask, what: str, done: str) -> None:
    """ASK(host) for each selected host; a host with its WHAT queued or running already is
    named in a warning instead (HostBusy). DONE, with the count, if any was asked."""
    asked = 0
    for host in queryset:
        try:
            ask(host)
            asked += 1
        except work_hosting.HostBusy:
            messages.warning(request, f"{host.name}: a {what} is already queued or running.")
    if asked:
        messages.info(request, done.format(asked))


@admin.action(description="Provision (install the bridge and the supervisor over SSH)")
def provision(modeladmin, request, queryset):
    _request_each(
        request,
        queryset,
        work_hosting.request_provision,
        "provisioning",
        "Provisioning {} host(s) on the worker.",
    )


@admin.action(description="Rolling restart (one bridge at a time)")
def rolling_restart(modeladmin, request, queryset):
    _request_each(
        request,
        queryset,
        lambda host: work_hosting.request_restart(host, by=request.user),
        "restart",
        "Restarts requested for {} host(s); their reports are under Host restarts.",
    )


@admin.action(description="Clear the pinned host key (accept a rebuilt host's new key)")
def clear_host_key(modeladmin, request, queryset):
    for host in queryset:
        hosting.clear_host_key(host, by=request.user)


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    form = HostForm
    list_display = ("name", "workspace", "address", "status", "capacity", "provisioned_at")
    list_filter = ("status", "multi_tenant")
    readonly_fields = ("fingerprint", "status", "problem", "provisioned_at")
    actions = [provision, rolling_restart, clear_host_key]

    @admin.display(description="Host key")
    def fingerprint(self, host):
        return work_hosting.fingerprint(host.host_key) or "not pinned yet"

    def save_model(self, request, obj, form, change):
        data = {f: form.cleaned_data[f] for f in (*EDITABLE, "root", "python")}
        key = form.cleaned_data["ssh_key"]
        if change:
            hosting.update_host(obj, ssh_key=key or None, by=request.user, **data)
        else:
            created = hosting.create_host(ssh_key=key, by=request.user, **data)
            obj.pk = created.pk

    def delete_model(self, request, obj):
        hosting.delete_host(obj)

    def has_delete_permission(self, request, obj=None):
        return obj is None or not obj.agents.exists()


@admin.register(HostRestart)
class HostRestartAdmin(ReadOnly):
    list_display = ("host", "status", "requested_by", "created_at", "finished_at")
    list_filter = ("status",)
    fields = ("host", "status", "requested_by", "created_at", "finished_at", "outcome")
    readonly_fields = fields

    @admin.display(description="What became of each bridge")
    def outcome(self, restart):
        return format_html_join(
            "",
            "<div>{}: {} ({} s)</div>",
            ((r["name"], r["outcome"], r.get("seconds", "–")) for r in restart.report),
        )
