"""A report's Markdown as one self-contained HTML page, for the reports idcgen writes (campaign, inspect,
affinity): the small subset they use: headings, paragraphs, "- " list items, pipe tables and images on a
line of their own, inlined as base64 PNG so the page can be mailed or archived alone."""

from __future__ import annotations

import base64
import html
from pathlib import Path

STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}img{max-width:100%}"
)


def _table(lines: list[str]) -> str:
    rows = [r.strip("|").split("|") for r in lines if not set(r) <= set("|-")]  # no |---| separator row
    head, body = rows[0], rows[1:]
    # body cells lose their code backticks: a page shows the value, not the Markdown around it
    return (
        "<table><tr>"
        + "".join(f"<th>{html.escape(c.strip())}</th>" for c in head)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{html.escape(c.strip().strip('`'))}</td>" for c in r) + "</tr>" for r in body)
        + "</table>"
    )


def to_html(md: str, folder, *, title: str = "idcgen report") -> str:
    """``md`` as an HTML page; image paths are read relative to ``folder`` (where report.md is)."""
    folder = Path(folder)
    out, table = [], []
    for line in md.splitlines() + [""]:  # the blank line at the end closes a last table
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            out.append(_table(table))
            table.clear()
        if line.startswith("!["):
            src = line[line.index("(") + 1 : -1]
            data = base64.b64encode((folder / src).read_bytes()).decode()
            out.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(src)}"></p>')
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(out)}</body></html>\n"
    )
