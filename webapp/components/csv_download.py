"""A "Download CSV" button whose file is safe to open in a spreadsheet.

Case ids, sources and report texts come from imported files; a cell such as
``=HYPERLINK(...)`` would run as a formula in Excel or LibreOffice. The file is built with
``backend.util.records_to_csv``: text cells starting with ``=``, ``+``, ``-``, ``@``, tab or
CR get a leading ``'`` (OWASP), numbers are written as numbers. Pages offer this button for
tables worth taking away instead of relying on the table toolbar's own CSV export, which
writes cells as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from radconcord.backend.util import records_to_csv


def csv_download(
    records: Sequence[Mapping[str, Any]],
    *,
    file_name: str,
    key: str,
    label: str = "Download CSV",
    columns: Sequence[str] | None = None,
) -> None:
    """Draw a download button serving ``records`` as formula-safe UTF-8 CSV.

    Args:
        records: One mapping per row (the same rows the page shows).
        file_name: Suggested file name.
        key: Widget key (unique on the page).
        label: Button text.
        columns: Column order (default: keys in order of first appearance).
    """
    st.download_button(
        label, data=records_to_csv(records, columns).encode("utf-8"), file_name=file_name,
        mime="text/csv", key=key, icon=":material/download:", on_click="ignore",
    )
