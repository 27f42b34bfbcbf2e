"""Names from producers shown as text: never as Markdown, HTML or LaTeX, on any page or chart.

Servers, regions, players and event ids are written by game servers, which this dashboard does not trust. A
name like ``![p](http://host/pixel.png)`` would make every viewer's browser fetch that URL if it reached
Streamlit's Markdown as it is, and ``<a href=...>`` in a plotly label is a link. So every such name passes
through one of the two functions here where it meets a renderer:

- :func:`md` for anything Streamlit reads as Markdown (``st.markdown``, ``st.caption``, ``st.error`` and the other
  notices, ``st.metric`` labels): every ASCII punctuation mark that Markdown, Streamlit's directives
  (``:red[...]``, ``:material/...:``) or its LaTeX (``$``) could read is escaped with a backslash, which
  CommonMark allows before any ASCII punctuation; line breaks become spaces, so a name cannot start a heading.
  GitHub's autolinks (``http://...``, ``www.``, ``a@b.c``) are found in the text after the escapes are read, so
  an invisible word joiner (U+2060) follows each ``:``, ``@`` and ``www``: the name reads the same and links
  nowhere.
- :func:`plot` for plotly's labels, which take a few HTML tags (``<a>``, ``<b>``, ``<br>``): ``<``, ``>`` and
  ``&`` become entities. :func:`safe_figure` applies it to every name a figure carries (trace names, category
  labels, hover data, annotations), once, where the page draws it.

>>> md("eu-[login here](http://x.test)").replace(JOINER, "+")
'eu-\\\\[login here\\\\]\\\\(http\\\\:+\\\\/\\\\/x\\\\.test\\\\)'
>>> md("a\\n# b")
'a \\\\# b'
>>> plot('<a href="http://x.test">x</a>')
'&lt;a href="http://x.test"&gt;x&lt;/a&gt;'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_MD_SPECIAL = re.compile(r"""([\\`*_{}\[\]()<>#+!|~$:.^=&"'/%@;?])""")
_LEADING_DASH = re.compile(r"^(\s*)-")
JOINER = "\u2060"
_AUTOLINK = re.compile(r"(?i)(:|@|www)")
_BREAKS = re.compile(r"[\r\n\t\v\f\x00-\x1f\x7f\u0085\u2028\u2029]+")


def md(name: object) -> str:
    """``name`` as literal text inside Streamlit Markdown."""
    text = _AUTOLINK.sub(lambda m: m.group() + JOINER, _BREAKS.sub(" ", str(name)))
    return _LEADING_DASH.sub(r"\1\\-", _MD_SPECIAL.sub(r"\\\1", text))


def plot(name: object) -> str:
    """``name`` as literal text inside a plotly label (which reads a few HTML tags and entities)."""
    return _BREAKS.sub(" ", str(name)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_list(names: Iterable[object]) -> list[str]:
    return [md(n) for n in names]


_TRACE_TEXT = ("name", "legendgroup", "x", "y", "customdata", "labels", "ids")
"""A trace's fields that may hold names. ``text`` and ``hovertext`` are left alone: where a page builds them with
markup of its own (``<b>``, ``<br>``), it passes each name through :func:`plot` as it builds them."""


def _escaped(value: Any) -> Any:  # noqa: ANN401 - any plotly value
    if isinstance(value, str):
        return plot(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_escaped(v) for v in value)
    if hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "OUS":  # numpy arrays of text
        return [_escaped(v) for v in value.tolist()]
    return value


def safe_figure(fig: Any) -> Any:  # noqa: ANN401 - a plotly figure
    """A copy of ``fig`` with every name it carries escaped for plotly (:func:`plot`); numbers and times as they
    are. ``fig`` itself is left as it was: a figure shared by every session (``dashboard.ui.chart``) must not be
    escaped again at each drawing."""
    fig = type(fig)(fig)
    for trace in fig.data:
        for field in _TRACE_TEXT:
            if field in trace and trace[field] is not None:
                trace[field] = _escaped(trace[field])
    for ann in fig.layout.annotations or ():
        if ann.text is not None:
            ann.text = plot(ann.text)
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        if axis.categoryarray is not None:
            axis.categoryarray = _escaped(axis.categoryarray)
        if axis.ticktext is not None:
            axis.ticktext = _escaped(axis.ticktext)
    return fig


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet runs as a formula at the start of a cell (OWASP's CSV injection)."""


def csv_cell(value: object) -> object:
    """A table cell a spreadsheet opening the page's "Download as CSV" will not run: text that starts like a
    formula gets a leading ``'``; numbers, and text that reads as a number, as they are.

    >>> csv_cell("=SUM(A1)"), csv_cell("@SUM(A1)"), csv_cell("eu-001"), csv_cell("-2"), csv_cell(3)
    ("'=SUM(A1)", "'@SUM(A1)", 'eu-001', '-2', 3)
    """
    if not isinstance(value, str) or not value.startswith(FORMULA_START) or value == "-":
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def csv_safe(data: Any) -> Any:  # noqa: ANN401 - rows, columns or a DataFrame, as st.dataframe takes them
    """Every text cell of a table through :func:`csv_cell`: producers' names reach tables, and every table offers
    its rows as CSV."""
    if isinstance(data, list):
        return [{k: csv_cell(v) for k, v in row.items()} if isinstance(row, dict) else row for row in data]
    if isinstance(data, dict):
        return {k: [csv_cell(v) for v in vs] if isinstance(vs, list) else vs for k, vs in data.items()}
    if hasattr(data, "columns") and hasattr(data, "map"):  # a pandas DataFrame
        return data.map(csv_cell)
    return data
