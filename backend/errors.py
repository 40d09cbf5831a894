"""Errors the services (and the parsers below them) raise; pages and the CLI show ``str(exc)``."""


class ServiceError(Exception):
    """Base class for errors a user can act on."""


class PermissionDenied(ServiceError):
    """The actor's role or assignments do not allow this action."""


class NotFound(ServiceError):
    """The requested object does not exist (or is not visible to the actor)."""


class InvalidInput(ServiceError):
    """Input was rejected; the message names the file, row and field where possible."""


def require_admin(actor: object) -> None:
    """Raise ``PermissionDenied`` unless ``actor`` is an admin."""
    if getattr(actor, "role", None) != "admin":
        raise PermissionDenied("this action needs an admin account")
