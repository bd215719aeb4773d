"""GET /api/v1/workspaces/<id>/export/: the workspace's archive (artifacts/export.py), a zip
built in a temporary file on disk and streamed from it. Its owner only; not a member: 404."""

import tempfile
import zipfile

from django.http import FileResponse
from django.urls import path
from django.utils import timezone
from django.utils.text import slugify
from rest_framework.views import APIView

from artifacts.export import write_export
from workspaces.access import IsPerson, access_membership


class ExportView(APIView):
    """GET: a zip of the workspace's conversations and artifacts, with a manifest."""

    permission_classes = [IsPerson]
    files = {"get": "application/zip"}

    def perform_content_negotiation(self, request, force=False):
        # The answer is a zip whatever Accept asks for; a refusal is the usual JSON error.
        return super().perform_content_negotiation(request, force=True)

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        spool = tempfile.TemporaryFile()
        try:
            with zipfile.ZipFile(spool, "w", zipfile.ZIP_DEFLATED) as archive:
                write_export(membership, archive)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        day = timezone.now().strftime("%Y-%m-%d")
        name = f"{slugify(membership.workspace.name) or 'workspace'}-{day}.zip"
        # FileResponse reads the file in chunks and closes it (deleting it) when sent.
        return FileResponse(
            spool, as_attachment=True, filename=name, content_type="application/zip"
        )


urlpatterns = [path("workspaces/<uuid:workspace_id>/export/", ExportView.as_view())]
