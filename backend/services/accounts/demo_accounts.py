"""The demo accounts and their published passwords (documented in the README, hence public).

A module of constants that imports nothing of the project, so the services that guard the
passwords (auth refuses them as a user's choice, sessions refuses them from another
computer) and the one that creates the accounts (seed) all read them from here.
"""

from __future__ import annotations

# (username, password, role, display name)
DEMO_USERS: tuple[tuple[str, str, str, str], ...] = (
    ("admin", "radconcord-admin", "admin", "Demo admin"),
    ("rater1", "radconcord-rater1", "rater", "Demo rater 1"),
    ("rater2", "radconcord-rater2", "rater", "Demo rater 2"),
)
DEMO_RATERS = tuple(u for u, _, role, _ in DEMO_USERS if role == "rater")


def published_passwords() -> frozenset[str]:
    """The demo accounts' passwords: never accepted from another computer."""
    return frozenset(password for _, password, _, _ in DEMO_USERS)


def demo_password_owners() -> dict[str, str]:
    """Each published password and the demo account it belongs to."""
    return {password: username for username, password, _, _ in DEMO_USERS}


__all__ = ["DEMO_RATERS", "DEMO_USERS", "demo_password_owners", "published_passwords"]
