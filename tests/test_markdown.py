"""idcgen.markdown: the reports' Markdown subset as one self-contained HTML page, checked against pages written
out by hand."""

import base64

from idcgen.markdown import to_html


def body(page: str) -> str:
    return page[page.index("<body>") + len("<body>") : page.index("</body>")]


def test_headings_lists_paragraphs_and_tables(tmp_path):
    md = (
        "# Report <1>\n\n- inputs: 10 & more\n\nA line.\n\n## Table\n\n| mutator | findings |\n|---|---|\n"
        "| `blur` | 3 |\n| noise | 0 |\nafter\n"
    )
    assert body(to_html(md, tmp_path)) == (
        "<h1>Report &lt;1&gt;</h1><li>inputs: 10 &amp; more</li><p>A line.</p><h2>Table</h2>"
        "<table><tr><th>mutator</th><th>findings</th></tr><tr><td>blur</td><td>3</td></tr>"
        "<tr><td>noise</td><td>0</td></tr></table><p>after</p>"
    )
    # a table on the last line is closed too
    assert body(to_html("| a |\n|---|\n| 1 |", tmp_path)) == "<table><tr><th>a</th></tr><tr><td>1</td></tr></table>"


def test_images_are_inlined_and_the_title_is_escaped(tmp_path):
    png = b"\x89PNG\r\n\x1a\nnot really an image"
    (tmp_path / "plot.png").write_bytes(png)
    page = to_html("![A plot](plot.png)\n", tmp_path, title="idcgen <inspect>")
    assert body(page) == f'<p><img src="data:image/png;base64,{base64.b64encode(png).decode()}" alt="plot.png"></p>'
    assert page.startswith("<!doctype html>") and "<title>idcgen &lt;inspect&gt;</title>" in page
