"""`segprep report OUT`: one self-contained HTML page about an output, for a person to read.

gather.py reads what the page shows (bounded: sampled records, capped rejects), charts.py
turns numbers into inline-SVG bar geometry, thumbnails.py makes the small inline JPEGs, and
page.html.j2 lays it out (Jinja2, autoescaped: keys and details are text, never markup).
The page loads nothing over the network and needs no JavaScript.
"""

from __future__ import annotations

import os
import stat

from beam_pipeline.commands.inspect_sheet.output import fitted_name, numbered
from beam_pipeline.commands.report.gather import ReportError, gather
from beam_pipeline.commands.report.render import render_page
from transforms import files


def default_report_path(output_dir: str) -> str:
    """`segprep-report-<output folder name>.html` beside the output folder, as `segprep
    inspect` writes its sheet (in the current folder for a gs:// output); a long folder
    name is cut to fit (fitted_name)."""
    if "://" in output_dir:
        name = output_dir.rstrip("/").rsplit("/", 1)[-1] or "output"
        folder = os.getcwd()
    else:
        output = os.path.realpath(output_dir)
        name, folder = os.path.basename(output) or "output", os.path.dirname(output)
    return os.path.join(folder, fitted_name(folder, "segprep-report-", name, ".html"))


_GENERATOR = b'<meta name="generator" content="segprep report">'
# Pages written before the generator tag: their head's policy and title, as the page had them
_EARLIER_HEAD = (b"default-src 'none'; img-src data:", b"<title>segprep report: ")


def _earlier_page(path: str) -> bool:
    """A regular file that a `segprep report` wrote: its generator tag near the top (or, for
    a page of an earlier segprep, its content policy and title)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return _GENERATOR in head or all(part in head for part in _EARLIER_HEAD)


def free_report_path(path: str) -> str:
    """The default page's place: `path` when it is new or an earlier page (replaced), else
    the first of `path` with _2, _3 ... that is; a file the user wrote there is kept."""
    return next(name for name in numbered(path) if not os.path.lexists(name) or _earlier_page(name))


def checked_report_path(path: str, output_dir: str) -> str:
    """`path` made absolute, if the page may be written there: a new name, or a regular file
    (replaced whole) in an existing folder outside the output. A folder, a link, a FIFO or a
    device is refused, so the page never replaces anything but an earlier page or a file the
    user named; so is a place inside the output (`--out OUT/metadata.json` replaced the
    dataset's commit marker with the page)."""
    path = os.path.abspath(path)
    if "://" not in output_dir:
        dataset = os.path.realpath(output_dir)
        if os.path.commonpath([os.path.realpath(path), dataset]) == dataset:
            raise ReportError(
                f"--out {path} is inside the output {output_dir}: write the page elsewhere"
            )
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ReportError(f"--out {path}: folder {folder} does not exist")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISDIR(mode):
        raise ReportError(f"--out {path} is a folder: give the HTML file's name")
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise ReportError(
            f"--out {path} is {kind}: segprep writes the page only to a new or regular file"
        )
    return path


def write_report(output_dir: str, out_file: str | None = None, version: int | None = None) -> str:
    """Write the page for `output_dir` (local or gs://) to a local file; its path.

    The place is checked before anything is read; the page is then written whole or not at
    all (a temporary name, then a rename), and a failed write leaves nothing behind."""
    path = checked_report_path(
        out_file if out_file else free_report_path(default_report_path(output_dir)), output_dir
    )
    if not output_dir.startswith("gs://"):
        output_dir = os.path.abspath(output_dir)
    html = render_page(gather(output_dir, version))
    try:
        # A lone surrogate (a JSON \ud800 escape in rejects.jsonl) has no UTF-8 form: the
        # page shows it as that escape.
        files.write_bytes(path, html.encode("utf-8", "backslashreplace"))
    except OSError as error:
        raise ReportError(
            f"--out {path}: cannot write the page: {error.strerror or error}"
        ) from None
    return path
