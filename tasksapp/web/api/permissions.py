from rest_framework.permissions import SAFE_METHODS, BasePermission

from tasksapp.web.operators import PERM_OPERATE, PERM_VIEW


class ViewOrOperate(BasePermission):
    """Reads need the viewer permission; writes the operator permission."""

    message = "you need the viewer role to read and the operator role to write."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return user.has_perm(PERM_VIEW if request.method in SAFE_METHODS else PERM_OPERATE)
