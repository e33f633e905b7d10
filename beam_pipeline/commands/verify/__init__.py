"""`segprep verify DIR`: re-read a published output and check it against its metadata.json.

A finished job writes metadata.json last, but copies, syncs and partial deletes happen
afterwards; this reads every shard the way a trainer would, so a broken dataset is found
before a training run trips over it. No Beam and no TensorFlow: files through the file layer
(transforms.files, local and gs://, bounded reads), records through the record-format
adapter, Examples by protobuf, pixels by simplejpeg and Pillow (pixels.py).

A class-id output (metadata.json `classes`) has each mask decoded at the stored bit depth,
every value checked to be a class id or the ignore index, and the per-split statistics
counted again from the masks read (a plain bincount) and compared with metadata.json.
"""

from beam_pipeline.commands.verify.check import check_output, run_verify, verify_output

__all__ = ["check_output", "run_verify", "verify_output"]
