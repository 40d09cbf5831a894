"""Per-study settings chosen by the lead (admin only), recorded with the study.

Settings change how raters see the pairs, so an analysis must be able to say which were in
force: every change is recorded in ``Study.settings`` with its time and the admin, and
:func:`export_settings` gives the block an export manifest carries.

Stored shape (``Study.settings``, a JSON object): each known key at the top level with its
value (absent: the default), and ``history``, a list of ``{"key", "from", "to", "at", "by"}``
in the order the changes were made. Known keys:

``highlight_differences`` (bool, default ``False``)
    Mark the words where the candidate report differs from the reference on the rating
    screen. Off by default: it may bias raters (they may look only where it points).

``annotation_mode`` (str, default ``counts``)
    How raters answer: ``counts`` (the ReXVal 6x2 grid), ``error_records`` (select each
    erroneous span of the candidate or an omitted reference sentence; the counts are derived
    from the records), ``pairwise`` (two candidates of one reference side by side: which is
    better, with tie, and a 1-5 rating of each). Fixed once a rater has answered anything
    in the study: the answers of one mode do not carry over to another. Pages name a mode
    by :data:`ANNOTATION_MODES` ("Error counts (ReXVal)", "Error records (spans)",
    "Preference (A vs B, 1-5)", each with one line on what raters do); the stored values
    never change.

``repeat_share`` (float in [0, 0.5], default 0)
    Share of each rater's study pairs shown to them a second time (hidden, later in their
    order) for intra-rater agreement. Applied when raters are assigned.

``qualification_items`` (int >= 0, default 0) and ``qualification_max_error`` (int >= 0,
default 1)
    Qualification gate: with ``qualification_items`` N > 0, a rater reaches the study pairs
    only after N training items whose total count is within ``qualification_max_error`` of
    the expert's total. 0: training items (if any) are shown first but gate nothing.

``adjudicate_significant_range`` (int >= 0, default 2) and ``adjudicate_category_12``
(bool, default True)
    The adjudication queue: pairs whose raters' totals of clinically significant errors span
    at least this range (0: rule off), or (when on) disagree on whether there is any
    significant error of category 1 or 2.

``break_reminder_minutes`` (int >= 0, default 50)
    Remind the rater to take a break after this many minutes of continuous rating (0: off).

``qc_min_seconds_per_pair`` (float >= 0, default 10), ``qc_min_seconds_per_film_pair``
(float >= 0, default 20) and ``qc_max_pairs_per_hour`` (float >= 0, default 180)
    Absolute floors of quality control (:mod:`backend.analysis.monitoring`), which flag a
    rater however many other raters there are: a done pair under the minimum time on task
    (the higher one when the pair has a film) is implausibly fast, and so is a pace above the
    maximum over any 5 consecutive completions (by their completion times, so a script that
    sends no time on task is caught too). Defaults: reading a reference and a candidate report
    and answering 12 cells takes well over 10 s (20 s when a film is to be looked at too), and
    180 pairs per hour is 20 s a pair sustained; a fast, honest radiologist stays inside both,
    while the scripted raters of issue 24 (3.7 s a pair, 320 and 948 pairs per hour) do not.
    0 turns a floor off.

A new key is one more :class:`Setting` in :data:`SETTINGS`; unknown keys are refused.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Comparison, ErrorRecord, Judgement, Pair, Rating
from radconcord.db.session import Database

#: The ``annotation_mode`` values, as stored.
COUNTS = "counts"
ERROR_RECORDS = "error_records"
PAIRWISE = "pairwise"

#: Key of the change log inside ``Study.settings``.
HISTORY_KEY = "history"


@dataclass(frozen=True)
class AnnotationMode:
    """One value of the ``annotation_mode`` setting, as a person reads it.

    Attributes:
        value: What is stored (``Study.settings``, exports, the command line): never changes.
        label: Its name on every page.
        summary: One line saying what raters do in this mode.
    """

    value: str
    label: str
    summary: str


#: The annotation modes, in the order pages offer them: the one place their names and
#: one-line descriptions are written (the settings, Studies, Assign and My studies pages
#: read them from here).
ANNOTATION_MODES: dict[str, AnnotationMode] = {
    m.value: m for m in (
        AnnotationMode(
            "counts", "Error counts (ReXVal)",
            "Raters count the candidate's errors in the 6 ReXVal categories, clinically "
            "significant or not, on the count grid."),
        AnnotationMode(
            "error_records", "Error records (spans)",
            "Raters mark each wrong span of the candidate (or an omitted reference sentence) "
            "with its category; the counts are derived from the records."),
        AnnotationMode(
            "pairwise", "Preference (A vs B, 1-5)",
            "Raters see two candidates of one reference side by side, pick the better one "
            "(or a tie) and rate each from 1 to 5."),
    )
}


def mode_label(value: str) -> str:
    """The name of an annotation mode on a page (an unknown value is shown as stored)."""
    mode = ANNOTATION_MODES.get(value)
    return mode.label if mode is not None else str(value)


def mode_summary(value: str) -> str:
    """One line saying what raters do in an annotation mode (empty for an unknown value)."""
    mode = ANNOTATION_MODES.get(value)
    return mode.summary if mode is not None else ""


def display_value(key: str, value: object) -> object:
    """A setting's value as a page shows it: an annotation mode by its label, else as is."""
    if key == "annotation_mode" and isinstance(value, str):
        return mode_label(value)
    return value


@dataclass(frozen=True)
class Setting:
    """One known study setting.

    Attributes:
        key: Its name in ``Study.settings``.
        type: The Python type a value must have (exactly: ``True`` is not an ``int``).
        default: Its value when never set.
        label: Short label for a page.
        caveat: What the lead must know before changing it.
    """

    key: str
    type: type
    default: Any
    label: str
    caveat: str = ""
    #: Allowed values (None: any value of ``type``).
    choices: tuple[Any, ...] | None = None
    #: Inclusive bounds for numbers (None: unbounded).
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: object) -> Any:  # noqa: ANN401 - typed per key
        """The value to store, or :class:`InvalidInput` naming the key and the rule.

        An int is accepted for a float setting (stored as float); a bool is never a number.
        """
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is not bool
                                                 and isinstance(value, bool)):
            raise InvalidInput(f"study setting {self.key!r} must be {self.type.__name__}, "
                               f"got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise InvalidInput(f"study setting {self.key!r} must be one of "
                               f"{', '.join(map(str, self.choices))}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise InvalidInput(f"study setting {self.key!r} must be >= {self.minimum:g}, "
                               f"got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise InvalidInput(f"study setting {self.key!r} must be <= {self.maximum:g}, "
                               f"got {value!r}")
        return value


#: Every known setting, by key.
SETTINGS: dict[str, Setting] = {
    s.key: s for s in (
        Setting(
            key="highlight_differences",
            type=bool,
            default=False,
            label="Highlight differences between the reference and the candidate",
            caveat="May bias raters; recorded with the study.",
        ),
        Setting(
            key="annotation_mode",
            type=str,
            default="counts",
            choices=tuple(ANNOTATION_MODES),
            label="Annotation mode: how raters answer",
            caveat="Choose before rating starts; recorded with the study.",
        ),
        Setting(
            key="repeat_share",
            type=float,
            default=0.0,
            minimum=0.0,
            maximum=0.5,
            label="Share of pairs shown twice to the same rater (intra-rater agreement)",
            caveat="Applied when raters are assigned.",
        ),
        Setting(
            key="qualification_items",
            type=int,
            default=0,
            minimum=0,
            label="Training items a rater must pass before the study pairs (0: no gate)",
        ),
        Setting(
            key="qualification_max_error",
            type=int,
            default=1,
            minimum=0,
            label="Largest difference from the expert's total count that passes an item",
        ),
        Setting(
            key="adjudicate_significant_range",
            type=int,
            default=2,
            minimum=0,
            label="Adjudicate pairs whose raters' significant-error totals span at least this "
                  "(0: off)",
        ),
        Setting(
            key="adjudicate_category_12",
            type=bool,
            default=True,
            label="Adjudicate pairs where raters disagree on any significant category 1/2 error",
        ),
        Setting(
            key="break_reminder_minutes",
            type=int,
            default=50,
            minimum=0,
            label="Remind the rater to take a break after this many minutes (0: off)",
        ),
        Setting(
            key="qc_min_seconds_per_pair",
            type=float,
            default=10.0,
            minimum=0.0,
            label="QC: fewest plausible seconds per pair, report text only (0: off)",
        ),
        Setting(
            key="qc_min_seconds_per_film_pair",
            type=float,
            default=20.0,
            minimum=0.0,
            label="QC: fewest plausible seconds per pair with a film (0: off)",
        ),
        Setting(
            key="qc_max_pairs_per_hour",
            type=float,
            default=180.0,
            minimum=0.0,
            label="QC: most plausible pairs per hour, over 5 consecutive pairs (0: off)",
        ),
    )
}


@dataclass(frozen=True)
class StudySettings:
    """A study's settings as in force now.

    Attributes:
        study_name: The study.
        values: Every known key with its value (the default where never set).
        changed_at: When each key was last changed (absent: never).
        history: Every change, oldest first (``key``, ``from``, ``to``, ``at``, ``by``).
    """

    study_name: str
    values: dict[str, Any]
    changed_at: dict[str, str] = field(default_factory=dict)
    history: tuple[dict[str, Any], ...] = ()

    @property
    def highlight_differences(self) -> bool:
        """Whether raters see the differences highlighted."""
        return bool(self.values["highlight_differences"])

    @property
    def annotation_mode(self) -> str:
        """``counts``, ``error_records`` or ``pairwise``."""
        return str(self.values["annotation_mode"])


def effective(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every known setting's value from a stored ``Study.settings`` (defaults filled in).

    Pure: any service that already loaded the study (the rating screen's) can call it.
    """
    raw = raw or {}
    out = {}
    for key, spec in SETTINGS.items():
        value = raw.get(key, spec.default)
        try:
            out[key] = spec.check(value)
        except InvalidInput:
            out[key] = spec.default
    return out


def export_settings(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The block an export manifest carries: values in force and their change history."""
    raw = raw or {}
    return {"values": effective(raw), HISTORY_KEY: copy.deepcopy(list(raw.get(HISTORY_KEY, [])))}


def _view(study_name: str, raw: Mapping[str, Any] | None) -> StudySettings:
    history = tuple(copy.deepcopy(list((raw or {}).get(HISTORY_KEY, []))))
    changed = {h["key"]: h["at"] for h in history if isinstance(h, dict) and "key" in h}
    return StudySettings(study_name=study_name, values=effective(raw), changed_at=changed,
                         history=history)


def study_settings(db: Database, actor: Actor, study_name: str) -> StudySettings:
    """A study's settings (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        return _view(study.name, study.settings)


def _checked(changes: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(changes) - set(SETTINGS))
    if unknown:
        raise InvalidInput(f"unknown study setting(s): {', '.join(unknown)} "
                           f"(known: {', '.join(SETTINGS)})")
    # bool is an int in Python; an int is never a switch and a switch never a count.
    return {key: SETTINGS[key].check(value) for key, value in changes.items()}


def _answers_stored(s: Session, study_id: int) -> int:
    """How many answers raters have stored in a study, in any annotation mode."""
    pair_ids = select(Pair.id).where(Pair.study_id == study_id)
    answers = (
        select(func.count()).select_from(Rating).where(Rating.pair_id.in_(pair_ids)),
        select(func.count()).select_from(ErrorRecord).where(ErrorRecord.pair_id.in_(pair_ids)),
        select(func.count()).select_from(Assignment).where(
            Assignment.study_id == study_id, Assignment.completed_at.is_not(None)),
        select(func.count()).select_from(Judgement).join(Comparison).where(
            Comparison.study_id == study_id,
            or_(Judgement.preference.is_not(None), Judgement.rating_a.is_not(None),
                Judgement.rating_b.is_not(None), Judgement.completed_at.is_not(None))),
    )
    return sum(int(s.scalar(query) or 0) for query in answers)


def update_study_settings(db: Database, actor: Actor, *, study_name: str,
                          **changes: Any) -> StudySettings:  # noqa: ANN401 - typed per key
    """Change some of a study's settings (admin only); each change is recorded.

    Only keys whose value differs are recorded; every change gets the time and the admin.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study.
        **changes: ``key=value`` for known keys (see :data:`SETTINGS`).

    Returns:
        The settings now in force.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: an unknown key or a value of the wrong type, or a new
            ``annotation_mode`` once raters have answered (nothing is changed).
    """
    require_admin(actor)
    wanted = _checked(changes)
    now = clock.utcnow().isoformat()
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        raw = copy.deepcopy(dict(study.settings or {}))
        current = effective(raw)
        mode = wanted.get("annotation_mode", current["annotation_mode"])
        if mode != current["annotation_mode"]:
            # Counts, error records and judgements are different answers: switching would
            # hide what was stored (or, counts to records, let records overwrite counts).
            stored = _answers_stored(s, study.id)
            if stored:
                raise InvalidInput(
                    f"study {study.name!r}: annotation_mode stays "
                    f"{current['annotation_mode']!r}: raters have already stored {stored} "
                    f"answer(s) in this mode; start a new study to rate in {mode!r}")
        history = list(raw.get(HISTORY_KEY, []))
        for key, value in wanted.items():
            if current[key] == value and key in raw:
                continue
            if current[key] != value:
                history.append({"key": key, "from": current[key], "to": value, "at": now,
                                "by": actor.username})
            raw[key] = value
        raw[HISTORY_KEY] = history
        # A new dict: the JSON column is not mutation-tracked.
        study.settings = raw
        return _view(study.name, raw)
