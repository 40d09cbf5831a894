"""Training (calibration) feedback on the rating screen: the expert's counts beside the rater's.

Shown above the grid once the rater has marked a training item done (never before: the
service refuses the expert's counts until then). One row per error category with its
definition (written out where the counts differ, on hover elsewhere), and for each
significance the rater's count next to the expert's; a cell where they differ is
highlighted. When the study sets a qualification gate, the item's result (total within the
allowed difference or not) comes first, and once the rater has qualified, that the study
pairs are open. Plain server-rendered HTML: the panel changes nothing, so it needs no round
trip of its own.
"""

from __future__ import annotations

from html import escape

import streamlit as st

from radconcord.backend.errors import ServiceError
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.quality import calibration
from radconcord.backend.types import Actor
from radconcord.db.session import Database

_CSS = """
<style>
.rc-feedback {width: 100%; border-collapse: collapse; font-size: 0.85rem;}
.rc-feedback th, .rc-feedback td {border: 1px solid rgba(128,128,128,0.35);
  padding: 0.2rem 0.4rem; vertical-align: top;}
.rc-feedback td.num {text-align: center; white-space: nowrap; font-variant-numeric: tabular-nums;}
.rc-feedback td.differs {background: rgba(255, 170, 0, 0.28); font-weight: 600;}
.rc-feedback .def {color: rgba(128,128,128,1); font-size: 0.78rem;}
</style>
"""


def feedback_html(fb: calibration.TrainingFeedback) -> str:
    """The feedback table as HTML (texts escaped)."""
    cells = {(c.category, c.significant): c for c in fb.cells}
    rows = []
    for category, (name, definition) in sorted(fb.definitions.items()):
        tds = []
        for significant in (True, False):
            c = cells[(category, significant)]
            cls = "num differs" if c.differs else "num"
            label = "significant" if significant else "insignificant"
            tds.append(f'<td class="{cls}" data-cell="{category}:{int(significant)}" '
                       f'title="{label}: you {c.rater}, expert {c.expert}">'
                       f"{c.rater} / {c.expert}</td>")
        # The definition where the counts differ (what the rater needs to learn from);
        # elsewhere on hover only, so the panel with its verdict fits a 1280x800 screen.
        differs = cells[(category, True)].differs or cells[(category, False)].differs
        label = (f"<b>{category}. {escape(name)}</b><br>"
                 f'<span class="def">{escape(definition)}</span>' if differs else
                 f'<span title="{escape(definition)}">{category}. {escape(name)}</span>')
        rows.append(f'<tr><td>{label}</td>{"".join(tds)}</tr>')
    total_cls = "num differs" if fb.rater_total != fb.expert_total else "num"
    rows.append(f'<tr><td><b>Total</b></td><td class="{total_cls}" colspan="2" '
                f'data-cell="total">{fb.rater_total} / {fb.expert_total}</td></tr>')
    return (_CSS + '<table class="rc-feedback"><thead><tr><th>Category</th>'
            "<th>Significant<br>you / expert</th><th>Insignificant<br>you / expert</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def verdict(fb: calibration.TrainingFeedback) -> str | None:
    """The pass/fail sentence when the study sets a qualification gate, else None."""
    if fb.max_error is None:
        return None
    diff = abs(fb.rater_total - fb.expert_total)
    if fb.passed:
        return (f"Passed: your total ({fb.rater_total}) is within {fb.max_error} of the "
                f"expert's ({fb.expert_total}).")
    return (f"Not passed: your total ({fb.rater_total}) differs from the expert's "
            f"({fb.expert_total}) by {diff}; at most {fb.max_error} passes.")


def training_feedback(db: Database, actor: Actor, view: rating.RaterPairView) -> None:
    """Show the expert counts of a done training item beside the rater's."""
    try:
        fb = calibration.training_feedback(db, actor, view.opaque_id)
    except ServiceError as exc:
        st.warning(str(exc))
        return
    with st.container(border=True, key="training_feedback"):
        st.markdown("**Training item: your counts / the expert's** "
                    "(highlighted where they differ)")
        # The verdict and the standing first: on a 1280x800 screen the table's end is
        # below the fold, and they say what comes next.
        sentence = verdict(fb)
        if sentence is not None:
            (st.success if fb.passed else st.warning)(sentence)
        # Once qualified, say that the study pairs are open; while the gate holds, the
        # rating page's banner already says where the rater stands (not twice).
        if fb.standing and fb.qualified:
            st.caption(fb.standing)
        st.html(feedback_html(fb))
