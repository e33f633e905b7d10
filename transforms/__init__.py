"""The framework-free core of segprep: bytes in, arrays or bytes out, typed errors.

Nothing here imports Apache Beam, TensorFlow or another segprep package (a test walks the
imports), so the job, the commands and the readers all build on it. The Beam PTransforms
that drive it live in `beam_pipeline/job/`.

- `pairing`, `splits`, `record`, `limits`, `rejects`, `class_stats`: per-entry logic.
- `codecs/`: image, binary mask and class-id mask decoding and encoding.
- `sources/`: where masks come from (mask files, class-id files, COCO), one module each
  behind the `MaskSource` protocol and its registry.
- `format/`: the single owner of the on-disk format: naming, record framing and the
  record-format adapters, the Example codec, the record index and `DatasetInfo`.
"""
