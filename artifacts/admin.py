"""Staff manage the card template library here (CARD-2); artifacts are shown read-only."""

import re

from django import forms
from django.contrib import admin

from agntchat.core.exceptions import AppError
from artifacts import actions
from artifacts.models import Artifact, CardTemplate

FORM_FIELDS = ("name", "result_type", "description", "layout", "default_actions", "sample")


class CardTemplateForm(forms.ModelForm):
    class Meta:
        model = CardTemplate
        fields = [*FORM_FIELDS, "is_active"]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        candidate = {name: data.get(name) for name in FORM_FIELDS}
        candidate["default_actions"] = candidate["default_actions"] or []
        candidate["description"] = candidate["description"] or ""
        candidate["version"] = self.instance.version or 1
        try:
            normalised = actions.validated_template(candidate)
        except AppError as exc:
            # "layout.badges[0]" → the "layout" box; anything else on the form as a whole.
            path = next(iter(exc.fields), "")
            field = re.split(r"[.\[]", path)[0]
            self.add_error(field if field in FORM_FIELDS else None, exc.message)
            return data
        data["layout"] = normalised["layout"]
        data["default_actions"] = normalised["default_actions"]
        data["sample"] = normalised.get("sample")
        return data


@admin.register(CardTemplate)
class CardTemplateAdmin(admin.ModelAdmin):
    form = CardTemplateForm
    list_display = ("name", "result_type", "version", "is_active", "updated_at")
    list_filter = ("is_active", "result_type")
    search_fields = ("name", "result_type", "description")
    readonly_fields = ("version",)

    def save_model(self, request, obj, form, change):
        actions.save_card_template(obj)

    def delete_model(self, request, obj):
        actions.delete_card_template(obj)

    def delete_queryset(self, request, queryset):
        for template in queryset:
            actions.delete_card_template(template)


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    """Read-only: artifacts change only through new versions, by people and agents in chat."""

    list_display = ("title", "kind", "conversation", "current_version", "created_at")
    list_filter = ("kind",)
    search_fields = ("title",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
