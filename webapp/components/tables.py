"""Cells of the tables the analysis pages show: a missing value is a blank, never "None".

``st.dataframe`` draws a missing value (``None`` or NaN, in any column type) as a grey
"None", which reads as a value in a published table. The pages therefore hand it text cells
made here: numbers at a fixed number of digits, missing values as ``""``. Downloads keep the
numbers at full precision (``csv_download`` writes ``None`` as an empty cell).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from radconcord.backend.analysis import reliability

#: The look of a cell that holds words instead of a number ("n too small", "n/a (...)").
GREY = "color: #9e9e9e; font-style: italic"


def num(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; ``""`` for ``None``, NaN or infinity."""
    if value is None:
        return ""
    v = float(value)
    return f"{v:.{digits}f}" if math.isfinite(v) else ""


def pct(value: float | None, digits: int = 1) -> str:
    """A percentage (``value`` already in percent) with a ``%`` sign; ``""`` when missing."""
    text = num(value, digits)
    return f"{text}%" if text else ""


def text(value: Any) -> str:  # noqa: ANN401 - any cell
    """``str(value)``, or ``""`` for ``None``."""
    return "" if value is None else str(value)


def when(value: dt.datetime | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS UTC``; ``""`` when missing."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def minutes_seconds(seconds: float | None) -> str:
    """A duration as ``M:SS`` (``H:MM:SS`` from an hour); ``""`` when missing."""
    if seconds is None or not math.isfinite(float(seconds)):
        return ""
    total = round(float(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def judged(value: float | None, n: int | None, min_n: int = reliability.MIN_PAIRS,
           digits: int = 3) -> str:
    """A statistic from ``n`` units as a table cell: the number, or "n too small" below
    ``min_n``, or "n/a (no variance)" when undefined (``backend/analysis/reliability.py``)."""
    return reliability.judge(value, n, min_n).text(digits)


def grey_judged(frame: Any) -> Any:  # noqa: ANN401 - a pandas DataFrame in, a Styler out
    """Grey the cells of ``frame`` that read "n too small" or "n/a (...)" instead of a
    number, so words are not read as values."""
    words = (reliability.N_TOO_SMALL, reliability.NO_VARIANCE, reliability.NO_DATA)
    return frame.style.map(lambda v: GREY if isinstance(v, str) and v in words else "")
