"""`segprep report OUT`: one self-contained HTML page about an output, for a person to read.

gather.py reads what the page shows (bounded: sampled records, capped rejects), charts.py
turns numbers into inline-SVG bar geometry, thumbnails.py makes the small inline JPEGs, and
page.html.j2 lays it out (Jinja2, autoescaped: keys and details are text, never markup).
The page loads nothing over the network and needs no JavaScript.
"""

from __future__ import annotations

import os

from beam_pipeline.commands.report.gather import gather
from beam_pipeline.commands.report.render import render_page


def default_report_path(output_dir: str) -> str:
    """`segprep-report-<output folder name>.html` in the current directory."""
    name = os.path.basename(output_dir.rstrip("/")) or "output"
    return os.path.abspath(f"segprep-report-{name}.html")


def write_report(output_dir: str, out_file: str | None = None, version: int | None = None) -> str:
    """Write the page for `output_dir` (local or gs://) to a local file; its path."""
    path = os.path.abspath(out_file) if out_file else default_report_path(output_dir)
    if not output_dir.startswith("gs://"):
        output_dir = os.path.abspath(output_dir)
    html = render_page(gather(output_dir, version))
    partial = f"{path}.partial-{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(html)
    os.replace(partial, path)
    return path
