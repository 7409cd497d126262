"""The HTML the report's pages are made of: the page's CSS, escaping, tables, cards."""

from __future__ import annotations

import base64
import html
from typing import Any

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 1.5em; color: #212121; background: #fafafa; }
h1 { margin-bottom: 0.1em; }
h2 { border-bottom: 2px solid #e0e0e0; padding-bottom: 0.2em; margin-top: 1.6em; }
.sub { color: #616161; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; }
.card { background: white; border: 1px solid #e0e0e0; border-radius: 6px; padding: 0.6em 1em;
        min-width: 9em; }
.card .label { font-size: 0.8em; color: #757575; text-transform: uppercase;
               letter-spacing: 0.04em; }
.card .value { font-size: 1.5em; font-weight: 600; }
.card .note { font-size: 0.8em; color: #616161; }
.card.main .value { font-size: 2em; color: #0d47a1; }
.valid { color: #2e7d32; } .invalid { color: #c62828; }
.card.unrepeatable { border-color: #f57c00; } .card.unrepeatable .value { color: #8d6e63; }
.card .mark { font-size: 0.75em; font-weight: 600; color: #e65100; text-transform: uppercase; }
table { border-collapse: collapse; background: white; font-size: 0.88em; margin: 0.5em 0; }
th, td { border: 1px solid #e0e0e0; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.kv th { width: 12em; }
.grid2 { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
figure { margin: 0.5em 0; }
figure img { max-width: 100%; border: 1px solid #e0e0e0; background: white; }
figcaption { color: #616161; font-size: 0.88em; }
.nodata { color: #9e9e9e; font-style: italic; }
.status { font-weight: 600; }
.st-completed { color: #2e7d32; } .st-early_stopped { color: #1e88e5; }
.st-deadline { color: #8d6e63; }
.st-diverged { color: #f57c00; } .st-failed { color: #c62828; }
code { font-size: 0.9em; word-break: break-all; }
ul.tree { list-style: none; margin: 0.1em 0 0.1em 0.3em; padding-left: 0.8em;
          border-left: 1px solid #e0e0e0; }
ul.tree li { margin: 0.1em 0; } .lineage-tree { font-size: 0.88em; }
.onpath { font-weight: 600; } .mk { font-weight: 600; }
details > summary { cursor: pointer; color: #424242; }
"""


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes included)."""
    return html.escape(str(value), quote=True)


def no_data(text: str = "no data") -> str:
    return f'<p class="nodata">{esc(text)}</p>'


def kv_table(rows: list[tuple[str, str]]) -> str:
    """Two-column table; both columns are escaped here."""
    if not rows:
        return no_data()
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def card(label: str, value: str, note: str = "", css: str = "", value_css: str = "") -> str:
    note_html = f'<div class="note">{esc(note)}</div>' if note else ""
    return (
        f'<div class="card {css}"><div class="label">{esc(label)}</div>'
        f'<div class="value {value_css}">{esc(value)}</div>{note_html}</div>'
    )


def figure_card(label: str, value: str, note: str, unrepeatable: Any, css: str = "") -> str:
    """A headline card of one of the run's figures; where it would not repeat (``unrepeatable``,
    the reason: results.json's ``score.not_repeatable``), marked so above its value, and why."""
    if not unrepeatable:
        return card(label, value, note, css)
    return (
        f'<div class="card unrepeatable {css}"><div class="label">{esc(label)}</div>'
        f'<div class="mark">not repeatable</div><div class="value">{esc(value)}</div>'
        f'<div class="note">{esc(unrepeatable)}</div><div class="note">{esc(note)}</div></div>'
    )


def image(png: bytes | None, caption: str) -> str:
    """A figure of PNG bytes embedded as a ``data:`` URI, with its caption; nothing for None."""
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )
