"""Names and blanks of the dashboard's numbers: categories named in agreement plots, one
legend entry per source of published values, blank (not "None") table cells."""

from __future__ import annotations

import datetime as dt

from radconcord.backend.figures import correlation as figures
from radconcord.backend.types import CATEGORIES
from radconcord.webapp.components import plots, tables


def test_agreement_bars_name_the_categories():
    rows = [{"scope": "total", "alpha_interval": 0.5, "icc2_1": 0.4, "icc2_k": 0.6}] + [
        {"scope": str(c), "alpha_interval": None, "icc2_1": 0.1, "icc2_k": None}
        for c in CATEGORIES]
    fig = plots.agreement_bars(rows)
    labels = [x.replace("<br>", " ") for x in fig.data[0].x]
    assert labels == ["Total errors"] + [f"{c}. {name}" for c, name in CATEGORIES.items()]
    assert all(len(line) <= 30 for x in fig.data[0].x for line in x.split("<br>"))
    assert plots.scope_label("7") == "7" and plots.scope_label(2) == "2. Omission of finding"


def test_forest_plot_names_each_published_source():
    rows = [
        {"key": "bleu4", "tau": 0.3, "lo": 0.2, "hi": 0.4,
         "published": [("ER2Score paper", 0.345)]},
        {"key": "bertscore_f", "tau": 0.4, "lo": 0.3, "hi": 0.5,
         "published": [("ER2Score paper", 0.507), ("RadCliQ paper", 0.5)]},
    ]
    fig = figures.forest_plot(rows)
    published = {t.name: (list(t.x), list(t.y)) for t in fig.data
                 if t.name.startswith("published")}
    assert published == {
        "published: ER2Score paper": ([0.345, 0.507], ["bleu4", "bertscore_f"]),
        "published: RadCliQ paper": ([0.5], ["bertscore_f"]),
    }
    markers = {t.marker.symbol for t in fig.data if t.name.startswith("published")}
    assert len(markers) == 2


def test_table_cells_are_blank_when_missing():
    assert (tables.num(None), tables.num(float("nan")), tables.num(0.12345)) == ("", "", "0.123")
    assert (tables.pct(None), tables.pct(41.26)) == ("", "41.3%")
    assert (tables.text(None), tables.text(3)) == ("", "3")
    assert tables.when(None) == ""
    assert tables.when(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02 03:04:05 UTC"
    assert [tables.minutes_seconds(v) for v in (None, 0.4, 60.5, 3725)] == [
        "", "0:00", "1:00", "1:02:05"]
