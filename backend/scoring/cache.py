"""The score cache: ``MetricScore`` rows keyed by (input hash, output key, signature hash).

Writers use insert-or-ignore (``ON CONFLICT DO NOTHING`` on SQLite and PostgreSQL), so two
processes scoring the same pairs at once, or a worker resuming after a crash, never create
duplicates and never fail on the unique constraint. NaN is stored as NULL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from radconcord.db.models import MetricScore

# Keep IN (...) lists well below every backend's bound-parameter limit.
_CHUNK = 500


@dataclass(frozen=True)
class ScoreRow:
    """One value to store."""

    input_hash: str
    family: str
    key: str
    signature_hash: str
    signature: str
    value: float
    details: dict[str, Any] | None
    device: str
    seconds: float


def lookup(
    session: Session,
    *,
    input_hashes: Iterable[str],
    keys: Sequence[str],
    signature_hash: str,
) -> dict[tuple[str, str], float]:
    """Cached values for ``input_hashes`` x ``keys`` under one signature hash.

    Args:
        session: An open session.
        input_hashes: Pair input hashes to look up (duplicates are fine).
        keys: Output keys of one family.
        signature_hash: The family's signature hash.

    Returns:
        ``(input_hash, key) -> value`` for the cells present; NULL comes back as ``nan``.
    """
    wanted = sorted(set(input_hashes))
    out: dict[tuple[str, str], float] = {}
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start : start + _CHUNK]
        rows = session.execute(
            select(MetricScore.input_hash, MetricScore.key, MetricScore.value).where(
                MetricScore.signature_hash == signature_hash,
                MetricScore.key.in_(list(keys)),
                MetricScore.input_hash.in_(chunk),
            )
        )
        for ih, key, value in rows:
            out[(ih, key)] = math.nan if value is None else float(value)
    return out


def _insert_ignore(session: Session) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        return None
    return dialect_insert(MetricScore).on_conflict_do_nothing(
        index_elements=["input_hash", "key", "signature_hash"]
    )


def store(session: Session, rows: Sequence[ScoreRow]) -> int:
    """Insert rows, ignoring cells that already exist. Runs inside the caller's transaction.

    Args:
        session: A session inside a transaction (the caller commits once per batch).
        rows: Values to store; NaN becomes NULL.

    Returns:
        The number of rows handed to the database (existing cells are silently kept).
    """
    if not rows:
        return 0
    payload = [
        {
            "input_hash": r.input_hash,
            "family": r.family,
            "key": r.key,
            "signature_hash": r.signature_hash,
            "signature": r.signature,
            "value": None if math.isnan(r.value) else float(r.value),
            "details": r.details,
            "device": r.device,
            "seconds": float(r.seconds),
        }
        for r in rows
    ]
    stmt = _insert_ignore(session)
    if stmt is not None:
        for start in range(0, len(payload), _CHUNK):
            session.execute(stmt, payload[start : start + _CHUNK])
        return len(payload)
    # Other dialects: check then insert; the unique constraint still guards against races.
    existing = {
        (r.input_hash, r.key, r.signature_hash)
        for r in session.execute(
            select(MetricScore.input_hash, MetricScore.key, MetricScore.signature_hash).where(
                MetricScore.signature_hash.in_({p["signature_hash"] for p in payload}),
                MetricScore.input_hash.in_({p["input_hash"] for p in payload}),
            )
        )
    }
    fresh = [p for p in payload if (p["input_hash"], p["key"], p["signature_hash"]) not in existing]
    if fresh:
        session.execute(insert(MetricScore), fresh)
    return len(fresh)
