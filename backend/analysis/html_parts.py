"""Public pieces of the self-contained HTML pages (the report, the leaderboard): pure text.

Every text that comes from data goes through :func:`esc`; numbers through :func:`num`,
:func:`p_value`, :func:`interval` and :func:`percent` (a dash for a missing value);
:func:`table` and :func:`kv_table` lay them out, :func:`figure` inlines figure markup.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The stylesheet of the report pages (inlined: no file, no host).
CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;
margin-top:2em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sig{font-weight:bold;background:#fff3c4}.muted{color:#777}.note{color:#555;font-size:.9em}
code{font-size:.85em;word-break:break-all}figure{margin:1em 0}
figure svg{max-width:100%;height:auto}footer{margin-top:3em;color:#555;font-size:.85em;
border-top:1px solid #ccc;padding-top:.5em}
"""


def esc(value: Any) -> str:  # noqa: ANN401 - any value shown as text
    """Escaped text of ``value`` (``None`` shows as a dash)."""
    if value is None:
        return "&ndash;"
    return html.escape(str(value), quote=True)


def num(value: Any, digits: int = 3) -> str:  # noqa: ANN401 - number, None or text
    if value is None:
        return "&ndash;"
    if isinstance(value, bool):
        return esc(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "&ndash;" if not math.isfinite(value) else f"{value:.{digits}f}"
    return esc(value)


def p_value(value: Any) -> str:  # noqa: ANN401 - p-value or None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return "&lt;0.001" if value < 0.001 else f"{value:.3f}"
    return "&ndash;"


def interval(ci: Any) -> str:  # noqa: ANN401 - [lo, hi] or None
    if not isinstance(ci, Sequence) or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return "&ndash;"
    return f"[{num(ci[0])}, {num(ci[1])}]"


def percent(value: Any) -> str:  # noqa: ANN401 - share (0..1+) or None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{100 * value:.0f}%"
    return "&ndash;"


def table(header: Sequence[str], rows: Iterable[Sequence[str]],
           classes: Iterable[str] | None = None) -> str:
    """A table; ``header`` is plain text (escaped here), ``rows`` are ready HTML cells."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    cls_iter = iter(classes) if classes is not None else None
    for row in rows:
        cls = next(cls_iter, "") if cls_iter is not None else ""
        attr = f' class="{cls}"' if cls else ""
        body.append(f"<tr{attr}>" + "".join(cell(c) for c in row) + "</tr>")
    if not body:
        return '<p class="muted">(none)</p>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def cell(content: str) -> str:
    # Cells holding a formatted number are right-aligned.
    stripped = content.replace("&ndash;", "").replace("&lt;", "").strip("[]%, .-0123456789")
    return f'<td class="num">{content}</td>' if not stripped else f"<td>{content}</td>"


def kv_table(items: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in items)
    return f"<table><tbody>{rows}</tbody></table>"


def absent(text: str) -> str:
    return f'<p class="muted">{esc(text)}</p>'


def figure(figures: Mapping[str, str], name: str, caption: str) -> str:
    markup = figures.get(name)
    if not markup:
        return ""
    return f"<figure>{markup}<figcaption class=\"note\">{esc(caption)}</figcaption></figure>"
