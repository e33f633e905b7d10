"""`segprep inspect DIR`: a contact sheet PNG of image | mask | overlay, for a human look.

Shard mode renders what training will see: records are decoded by the readers' own decoder
(shard_reader.source.decode_example, mask thresholded at 128), so a mask that looks right here
is right for the model. A class-id output (metadata.json has `classes`) shows the stored ids in
colour with a legend of the classes shown. `--rejects` mode renders the original files named
in rejects.jsonl. The sheet is written outside the dataset directory (a published output),
under a name no earlier sheet has: never over another one. No TensorFlow, no Beam.

Modules: drawing (layout and pixels), examples (records of a split), rejects (rejects.jsonl),
output (the dataset's metadata and the sheet's file name), command (the CLI body).
"""

from beam_pipeline.commands.inspect_sheet.command import build_sheet, run_inspect
from beam_pipeline.commands.inspect_sheet.drawing import (
    CAPTION_HEIGHT,
    CELL_GAP,
    COLUMNS,
    MARGIN,
    MAX_COUNT,
    TILE_GAP,
    TITLE_HEIGHT,
    UNAVAILABLE,
    sheet_size,
)
from beam_pipeline.commands.inspect_sheet.examples import class_palette, shard_entries
from beam_pipeline.commands.inspect_sheet.output import write_new
from beam_pipeline.commands.inspect_sheet.rejects import reject_entries

__all__ = [
    "CAPTION_HEIGHT",
    "CELL_GAP",
    "COLUMNS",
    "MARGIN",
    "MAX_COUNT",
    "TILE_GAP",
    "TITLE_HEIGHT",
    "UNAVAILABLE",
    "build_sheet",
    "class_palette",
    "reject_entries",
    "run_inspect",
    "shard_entries",
    "sheet_size",
    "write_new",
]
