"""The page: Jinja2 with autoescaping, every chart and thumbnail inline."""

from __future__ import annotations

import datetime
import html
from typing import Any

import jinja2

from beam_pipeline import __version__
from beam_pipeline.commands.report.charts import bar_chart
from beam_pipeline.commands.report.gather import Report, splits_of

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("beam_pipeline.commands.report", "."),
    autoescape=True,  # keys, details and file names are text, never markup
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _bytes(value: Any) -> str:
    size = float(value or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return str(value)


_ENVIRONMENT.filters["bytes"] = _bytes
_ENVIRONMENT.filters["splits"] = lambda group: ", ".join(splits_of(group))
_ENVIRONMENT.filters["pct"] = lambda value: f"{100 * float(value):.1f} %"


def render_page(report: Report) -> str:
    charts: dict[str, Any] = {}
    for split in report.splits:
        if split.class_rows:
            colours = [row["colour"] for row in split.class_rows]
            charts[f"{split.name}/pixels"] = bar_chart(
                "pixel share",
                [(row["name"], row["share"]) for row in split.class_rows],
                fmt="{:.2%}",
                colours=colours,
            )
            charts[f"{split.name}/images"] = bar_chart(
                "images containing the class",
                [(row["name"], row["images"]) for row in split.class_rows],
                colours=colours,
            )
        if split.foreground:
            charts[f"{split.name}/foreground"] = bar_chart(
                "foreground fraction per image", split.foreground
            )
        if split.sizes:
            charts[f"{split.name}/sizes"] = bar_chart("image size (HxW)", split.sizes)
    if report.rejects:
        charts["rejects"] = bar_chart(
            "rejects per reason",
            [(reason.reason, reason.count) for reason in report.rejects],
            colours=["#c0504d"] * len(report.rejects),
        )
    if report.weights:
        charts["weights"] = bar_chart(
            "suggested class weights (median frequency, train)",
            report.weights,
            fmt="{:.3f}",
        )
    return _ENVIRONMENT.get_template("page.html.j2").render(
        report=report,
        charts=charts,
        version=__version__,
        generated=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        escape=html.escape,
    )
