"""The service errors, defined in :mod:`backend.errors` (below every package that raises them).

Kept so that ``from backend.services.errors import ...`` keeps working for pages and services.
"""

from radconcord.backend.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ServiceError,
    require_admin,
)

__all__ = ["InvalidInput", "NotFound", "PermissionDenied", "ServiceError", "require_admin"]
