"""The segprep Beam job: raw image and mask files to sharded TFRecords."""

__version__ = "0.1.0"
