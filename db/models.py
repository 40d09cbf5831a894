"""SQLAlchemy 2.0 typed models: the study database.

Services own sessions and transactions; these classes never leave the service layer (pages get
plain dataclasses). Change a model only together with an Alembic migration in
``db/migrations/versions``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from radconcord.backend import clock


def _column_now() -> dt.datetime:
    """Default of the timestamp columns: :func:`backend.clock.utcnow`, looked up at each
    insert so a test that patches the clock moves the defaults too."""
    return clock.utcnow()


class Base(DeclarativeBase):
    """Declarative base with a JSON type map."""

    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class User(Base):
    """An account: ``admin`` (study lead / researcher) or ``rater`` (radiologist)."""

    __tablename__ = "users"
    __table_args__ = (CheckConstraint("role IN ('admin', 'rater')", name="ck_users_role"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(128), default="")
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str] = mapped_column(String(255))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Set for accounts created with a one-time password or reset by an admin: the user must
    # choose a new password before anything else (also for demo accounts on a public server).
    must_change_password: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default="0"
    )
    password_changed_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), default=None
    )
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class AuthSession(Base):
    """A logged-in browser: the sha256 of its cookie token, never the token itself.

    Kept in the database so that sessions survive a server restart, are shared by several
    server processes, and are revoked at once (``revoked_at``) by logout, deactivation or a
    password change. ``ticket_sha256`` is a short-lived one-time ticket the page hands to the
    browser, which exchanges it at the server's cookie endpoint for the HttpOnly cookie.
    """

    __tablename__ = "auth_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str | None] = mapped_column(String(64), unique=True, default=None)
    ticket_sha256: Mapped[str | None] = mapped_column(String(64), unique=True, default=None)
    ticket_expires_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), default=None
    )
    # sha256 prefix of the password hash at issue time: a password change invalidates it.
    credential_stamp: Mapped[str] = mapped_column(String(64), default="")
    client: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    last_seen_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    revoked_reason: Mapped[str | None] = mapped_column(String(32), default=None)


class LoginThrottle(Base):
    """Failed logins per account (``user:<name>``) or per client (``client:<address>``)."""

    __tablename__ = "login_throttles"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_failure_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), default=None
    )
    locked_until: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), default=None
    )


class Case(Base):
    """One exam of one study: its images and its reports.

    Cases belong to the study that imported them: two studies may use the same external
    case id for different exams, and one study's import never changes another's images.
    """

    __tablename__ = "cases"
    __table_args__ = (
        UniqueConstraint("study_id", "external_id", name="uq_cases_study_external"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # NULL only for a case no pair uses (left from before cases were scoped by study).
    study_id: Mapped[int | None] = mapped_column(
        ForeignKey("studies.id", ondelete="CASCADE"), index=True, default=None
    )
    external_id: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)

    images: Mapped[list[Image]] = relationship(back_populates="case", order_by="Image.id")
    reports: Mapped[list[Report]] = relationship(back_populates="case", order_by="Report.id")


class Image(Base):
    """An image file of a case, stored under the data folder (path is relative to it)."""

    __tablename__ = "images"
    __table_args__ = (UniqueConstraint("case_id", "sha256", name="uq_images_case_sha"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(String(512))
    format: Mapped[str] = mapped_column(String(16))  # dicom | png | jpeg | volume
    # "film": one 2-D image file; "volume": a CT/MR volume stored by
    # backend.imaging.volume_store (path is its folder; meta["volume"] has shape and spacing).
    kind: Mapped[str] = mapped_column(String(16), default="film", server_default="film")
    view: Mapped[str | None] = mapped_column(String(32), default=None)  # PA, AP, LATERAL, ...
    sha256: Mapped[str] = mapped_column(String(64))
    width: Mapped[int | None] = mapped_column(Integer, default=None)
    height: Mapped[int | None] = mapped_column(Integer, default=None)
    # De-identified header fields useful for display (photometric, window, modality...).
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)

    case: Mapped[Case] = relationship(back_populates="images")


class Report(Base):
    """A report text: the reference of a case or a candidate from some generator."""

    __tablename__ = "reports"
    __table_args__ = (
        CheckConstraint("role IN ('reference', 'candidate')", name="ck_reports_role"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    source: Mapped[str | None] = mapped_column(String(128), default=None)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)

    case: Mapped[Case] = relationship(back_populates="reports")


# Status of a study whose import is still being written in batches: no user sees it.
STUDY_STAGING = "importing"


class Study(Base):
    """A rating study: a set of pairs, a scheme, raters and assignment settings."""

    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    scheme: Mapped[str] = mapped_column(String(32), default="rexval")
    raters_per_pair: Mapped[int] = mapped_column(Integer, default=1)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    # importing (being written in batches, invisible everywhere) | draft | open | closed
    status: Mapped[str] = mapped_column(String(16), default="open")
    # Where the pairs came from (import file hashes, builder metrics/signatures, seeds).
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Per-study options chosen by the lead (e.g. ``highlight_differences``); recorded so an
    # analysis can say how the raters saw the pairs. Keys are documented in
    # backend/services/study_admin/study_settings.py.
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)

    pairs: Mapped[list[Pair]] = relationship(back_populates="study", order_by="Pair.position")


#: ``Pair.kind`` of the pairs every analysis and export of study ratings counts.
PAIR_STUDY = "study"
#: A calibration item (done first, expert counts shown after submission).
PAIR_TRAINING = "training"
#: A hidden second showing of a study pair to the same rater (intra-rater agreement).
PAIR_REPEAT = "repeat"


class Pair(Base):
    """A reference/candidate pair inside a study.

    ``opaque_id`` is what raters see; ``source`` (the generator) never reaches a rater.
    ``input_hash`` ties the pair to cached metric scores for identical texts and images.
    """

    __tablename__ = "pairs"
    __table_args__ = (
        UniqueConstraint("study_id", "reference_id", "candidate_id", "kind",
                         name="uq_pairs_triplet"),
        UniqueConstraint("study_id", "position", name="uq_pairs_position"),
        CheckConstraint("kind IN ('study', 'training', 'repeat')", name="ck_pairs_kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id"), index=True)
    reference_id: Mapped[int] = mapped_column(ForeignKey("reports.id"))
    candidate_id: Mapped[int] = mapped_column(ForeignKey("reports.id"))
    source: Mapped[str] = mapped_column(String(128), default="")
    opaque_id: Mapped[str] = mapped_column(String(32), unique=True)
    position: Mapped[int] = mapped_column(Integer)
    input_hash: Mapped[str] = mapped_column(String(64), index=True)
    # ``study``: counted by every analysis and export of study ratings. ``training``: a
    # calibration item done first, with ``expert`` counts shown after submission; never in
    # the study's statistics. ``repeat``: a hidden second showing of ``repeat_of_id`` to the
    # same rater (its own opaque id, so not recognisable), used only for intra-rater
    # agreement. Only ``study`` pairs are numbered for the lead.
    kind: Mapped[str] = mapped_column(String(16), default="study", server_default="study")
    repeat_of_id: Mapped[int | None] = mapped_column(
        ForeignKey("pairs.id", ondelete="CASCADE"), default=None, index=True)
    # Training items: {"counts": {"<category>:<0|1>": n, ...}, "source": "expert ..."}.
    expert: Mapped[dict[str, Any] | None] = mapped_column(default=None)

    study: Mapped[Study] = relationship(back_populates="pairs")
    case: Mapped[Case] = relationship()
    reference: Mapped[Report] = relationship(foreign_keys=[reference_id])
    candidate: Mapped[Report] = relationship(foreign_keys=[candidate_id])


class Assignment(Base):
    """A pair given to a rater, in the rater's own seeded order."""

    __tablename__ = "assignments"
    __table_args__ = (
        UniqueConstraint("rater_id", "pair_id", name="uq_assignments_rater_pair"),
        Index("ix_assignments_rater_order", "rater_id", "study_id", "order_index"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    rater_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"), index=True)
    order_index: Mapped[int] = mapped_column(Integer)
    # Set when the rater marks the pair done (an all-zero pair needs explicit confirmation).
    completed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    # Time on task credited (``backend.services.annotation.activity``) and what the browser claimed
    # (the union of the spans as sent); the difference is the time clipped by the rules.
    active_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    claimed_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    last_active_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), default=None
    )
    # Bumped by every change of this rater's counts or done-state of the pair: a save
    # carries the version the rater saw, and a stale one (another tab) is refused.
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # "I'm unsure / flag this pair": set by the rater with an optional note the lead sees.
    flagged_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    flag_note: Mapped[str | None] = mapped_column(Text, default=None)


#: ``StudyRole.role`` of a senior reader who records consensus counts.
ROLE_ADJUDICATOR = "adjudicator"


class StudyRole(Base):
    """A per-study role of an account beyond rating: ``adjudicator`` (a senior reader).

    An adjudicator sees every rater's counts of the study's pairs (anonymised as Rater
    A/B/C) in the adjudication view only, and records consensus counts.
    """

    __tablename__ = "study_roles"
    __table_args__ = (
        UniqueConstraint("study_id", "user_id", "role", name="uq_study_roles"),
        CheckConstraint("role IN ('adjudicator')", name="ck_study_roles_role"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"),
                                          index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class Adjudication(Base):
    """Consensus counts of a pair recorded by an adjudicator, with a note.

    ``counts`` maps ``"<category>:<0|1>"`` (1 = clinically significant) to a count, all
    twelve cells. ``version`` is bumped by every change (stale writes are refused).
    """

    __tablename__ = "adjudications"

    id: Mapped[int] = mapped_column(primary_key=True)
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"),
                                         unique=True)
    adjudicator_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    note: Mapped[str] = mapped_column(Text, default="")
    # Why the pair was in the queue when adjudicated (the rule and what it found).
    reason: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class ErrorRecord(Base):
    """One error a rater marked: a span of the candidate, or an omission vs the reference.

    In a study with per-error records the rater's 6x2 counts (``ratings``) are derived from
    these rows in the same transaction, so the counts stay the single source of every
    analysis. ``kind``: ``span`` (words of the candidate are wrong), ``omission`` (a sentence
    of the reference is missing from the candidate). Offsets are character offsets into the
    report text, end exclusive. ``details`` keeps imported fields verbatim (RadPref).
    """

    __tablename__ = "error_records"
    __table_args__ = (
        CheckConstraint("category BETWEEN 1 AND 6", name="ck_error_records_category"),
        CheckConstraint("kind IN ('span', 'omission')", name="ck_error_records_kind"),
        Index("ix_error_records_rater_pair", "rater_id", "pair_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    category: Mapped[int] = mapped_column(Integer)
    significant: Mapped[bool] = mapped_column(Boolean)
    candidate_start: Mapped[int | None] = mapped_column(Integer, default=None)
    candidate_end: Mapped[int | None] = mapped_column(Integer, default=None)
    candidate_text: Mapped[str | None] = mapped_column(Text, default=None)
    reference_start: Mapped[int | None] = mapped_column(Integer, default=None)
    reference_end: Mapped[int | None] = mapped_column(Integer, default=None)
    reference_text: Mapped[str | None] = mapped_column(Text, default=None)
    note: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class Comparison(Base):
    """Two candidate pairs of the same reference, judged side by side (pairwise mode).

    ``opaque_id`` is what raters see; which pair is shown left (A) is fixed here.
    ``meta`` keeps case fields of an imported comparison verbatim (RadPref: findings lists,
    patient age and sex, indication...).
    """

    __tablename__ = "comparisons"
    __table_args__ = (
        UniqueConstraint("study_id", "pair_a_id", "pair_b_id", name="uq_comparisons_pairs"),
        UniqueConstraint("study_id", "position", name="uq_comparisons_position"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"),
                                          index=True)
    pair_a_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"))
    pair_b_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    opaque_id: Mapped[str] = mapped_column(String(32), unique=True)
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Judgement(Base):
    """A rater's pairwise judgement of a comparison: the assignment and the answer in one.

    ``preference``: ``A``, ``B`` or ``tie`` (None: not given yet); ``rating_a``/``rating_b``:
    the 1-5 overall rating of each candidate. ``details`` keeps imported per-candidate
    fields verbatim (RadPref ``rating_explanation``, ``new_finding_indices``).
    """

    __tablename__ = "judgements"
    __table_args__ = (
        UniqueConstraint("rater_id", "comparison_id", name="uq_judgements_rater_comparison"),
        CheckConstraint("preference IS NULL OR preference IN ('A', 'B', 'tie')",
                        name="ck_judgements_preference"),
        CheckConstraint("rating_a IS NULL OR rating_a BETWEEN 1 AND 5",
                        name="ck_judgements_rating_a"),
        CheckConstraint("rating_b IS NULL OR rating_b BETWEEN 1 AND 5",
                        name="ck_judgements_rating_b"),
        Index("ix_judgements_rater_order", "rater_id", "order_index"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    comparison_id: Mapped[int] = mapped_column(
        ForeignKey("comparisons.id", ondelete="CASCADE"), index=True)
    order_index: Mapped[int] = mapped_column(Integer)
    preference: Mapped[str | None] = mapped_column(String(8), default=None)
    rating_a: Mapped[int | None] = mapped_column(Integer, default=None)
    rating_b: Mapped[int | None] = mapped_column(Integer, default=None)
    details: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    completed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    # Time on task, derived from ``judgement_spans`` as for an assignment.
    active_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    claimed_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    last_active_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True),
                                                               default=None)


class _SpanColumns:
    """The columns of an interval of a rater's own activity (input and focus events).

    Sent by the browser; ``client_id`` names the page load (tab) so a span resent after a
    lost reply is stored once. Time on task is derived from these spans, never from the
    server's view of requests.

    ``started_at``/``ended_at`` are what the browser claimed. ``session_id`` is the login
    session that posted the span (None: stored by server code, or before migration 0008).
    ``clip_start``/``clip_end`` is the part of the claim inside the rater's sessions (None:
    no part), and ``credited_seconds`` the part of that no span of the rater stored earlier
    covers, whatever its pair: an instant of the rater's time is credited once.
    """

    id: Mapped[int] = mapped_column(primary_key=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    client_id: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    active_ms: Mapped[int] = mapped_column(Integer)
    events: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    session_id: Mapped[int | None] = mapped_column(
        ForeignKey("auth_sessions.id", ondelete="SET NULL"), default=None)
    clip_start: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True),
                                                           default=None)
    clip_end: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    credited_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class JudgementSpan(_SpanColumns, Base):
    """A span of activity on one comparison (the Compare screen): what
    :class:`ActivitySpan` is for a pair. Time on task of a judgement derives from these."""

    __tablename__ = "judgement_spans"
    __table_args__ = (
        UniqueConstraint("client_id", "judgement_id", "started_at",
                         name="uq_judgement_spans_client_start"),
        CheckConstraint("active_ms >= 0", name="ck_judgement_spans_active_ms"),
        Index("ix_judgement_spans_judgement", "judgement_id"),
        # The rater's timeline (an instant is credited once) is read by rater and start.
        Index("ix_judgement_spans_rater_start", "rater_id", "started_at"),
    )

    judgement_id: Mapped[int] = mapped_column(ForeignKey("judgements.id", ondelete="CASCADE"))


class ActivitySpan(_SpanColumns, Base):
    """An interval of a rater's own activity (input and focus events) on one pair (see
    :class:`_SpanColumns`)."""

    __tablename__ = "activity_spans"
    __table_args__ = (
        UniqueConstraint("client_id", "assignment_id", "started_at",
                         name="uq_activity_spans_client_start"),
        CheckConstraint("active_ms >= 0", name="ck_activity_spans_active_ms"),
        Index("ix_activity_spans_assignment", "assignment_id"),
        Index("ix_activity_spans_rater_start", "rater_id", "started_at"),
    )

    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"))


class Rating(Base):
    """The current error count of one rater for one pair, category and significance."""

    __tablename__ = "ratings"
    __table_args__ = (
        UniqueConstraint(
            "rater_id", "pair_id", "category", "significant", name="uq_ratings_cell"
        ),
        CheckConstraint("category BETWEEN 1 AND 6", name="ck_ratings_category"),
        CheckConstraint("count >= 0", name="ck_ratings_count"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"), index=True)
    category: Mapped[int] = mapped_column(Integer)
    significant: Mapped[bool] = mapped_column(Boolean)
    count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class RatingEvent(Base):
    """Append-only audit of every change a rater makes (never updated or deleted)."""

    __tablename__ = "rating_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id", ondelete="CASCADE"), index=True)
    action: Mapped[str] = mapped_column(String(32))  # set | complete | reopen | import
    category: Mapped[int | None] = mapped_column(Integer, default=None)
    significant: Mapped[bool | None] = mapped_column(Boolean, default=None)
    old_count: Mapped[int | None] = mapped_column(Integer, default=None)
    new_count: Mapped[int | None] = mapped_column(Integer, default=None)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class MetricScore(Base):
    """A cached per-pair metric value, keyed by input content and metric signature.

    ``input_hash`` is the sha256 of the reference, candidate and image digests, so that
    scores are shared by identical pairs across studies and CLI runs.
    """

    __tablename__ = "metric_scores"
    __table_args__ = (
        UniqueConstraint("input_hash", "key", "signature_hash", name="uq_scores_cell"),
        Index("ix_scores_key_sig", "key", "signature_hash"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    input_hash: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(64))
    signature_hash: Mapped[str] = mapped_column(String(32))
    signature: Mapped[str] = mapped_column(Text)
    value: Mapped[float | None] = mapped_column(Float, default=None)
    details: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    device: Mapped[str] = mapped_column(String(32), default="cpu")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)


class Job(Base):
    """A long task for a worker process: scoring, probes, an oracle build, training, ...

    ``kind`` names an entry of the job-kind registry (``backend.jobs``); ``params`` are its
    JSON inputs and ``result`` its JSON output. A job moves ``queued -> running -> done |
    failed | cancelled``; ``cancel_requested`` asks the running worker to stop. ``attempts``
    counts claims, so a job whose workers keep dying is failed instead of retried forever.
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_kind", "status", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    study_id: Mapped[int | None] = mapped_column(
        ForeignKey("studies.id", ondelete="CASCADE"), default=None, index=True
    )
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Where it may run: "cpu", "cuda" (any GPU) or None (any worker).
    device: Mapped[str | None] = mapped_column(String(32), default=None)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    created_by: Mapped[str] = mapped_column(String(64), default="")
    worker_id: Mapped[str | None] = mapped_column(String(128), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class WorkerProcess(Base):
    """A worker process as it announces itself: shown on the Metrics page while alive."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    host: Mapped[str] = mapped_column(String(128), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    device: Mapped[str] = mapped_column(String(32), default="cpu")
    kinds: Mapped[list[Any]] = mapped_column(default=list)  # job kinds it takes; [] = all
    current_job_id: Mapped[int | None] = mapped_column(Integer, default=None)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    stopped_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class ScoreImport(Base):
    """One import of a metric's values computed elsewhere (an API, a cluster, a notebook).

    The values are ``MetricScore`` rows of family ``external`` under the signature
    ``external:<key>|sha256:<file digest>``, keyed like computed scores by the pairs' input
    hashes; this row says which study imported them and how to read them (the direction
    comes from here, not from the metric registry). A study uses the latest import of each
    key (``backend.analysis.data.study_imports``); older imports stay here and their score
    rows stay in ``metric_scores``.
    """

    __tablename__ = "score_imports"
    __table_args__ = (Index("ix_score_imports_study_key", "study_id", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(Text)
    signature_hash: Mapped[str] = mapped_column(String(32))
    higher_is_better: Mapped[bool] = mapped_column(Boolean)
    description: Mapped[str] = mapped_column(Text, default="")
    # Where the values come from: a URL, a paper, a notebook path (free text).
    source: Mapped[str] = mapped_column(Text, default="")
    file_name: Mapped[str] = mapped_column(String(255))
    file_sha256: Mapped[str] = mapped_column(String(64))
    # Study pairs with a value, and without one (no row in the file, or a blank/NaN value).
    n_pairs: Mapped[int] = mapped_column(Integer)
    n_missing: Mapped[int] = mapped_column(Integer, default=0)
    imported_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=_column_now)
    # Username of the admin (``system`` for the command line).
    imported_by: Mapped[str] = mapped_column(String(64), default="")
