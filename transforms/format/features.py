"""The tf.train.Example schema, declared once and imported by writer and reader."""

from __future__ import annotations

IMAGE = "image"
MASK = "mask"
KEY = "key"
HEIGHT = "height"
WIDTH = "width"

# Feature name -> (TFRecord type, meaning); written into metadata.json as the schema.
SCHEMA: dict[str, dict[str, str]] = {
    IMAGE: {"type": "bytes", "description": "RGB image, JPEG-encoded"},
    MASK: {"type": "bytes", "description": "single-channel mask, values 0 or 255"},
    KEY: {"type": "bytes", "description": "entry key (file stem), UTF-8"},
    HEIGHT: {"type": "int64", "description": "image and mask height in pixels"},
    WIDTH: {"type": "int64", "description": "image and mask width in pixels"},
}

MASK_FORMATS = ("jpeg", "png")
# The only Pillow plugins segprep opens images and masks with (a camera's MPO comes through
# JPEG's; GIF for Carvana-style masks, given by --mask_suffix): left to itself Pillow tries
# every format it knows, and some (ICO, ICNS) decode a whole embedded image while opening,
# before any size can be checked.
PILLOW_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP")
# The first 8 bytes of every PNG (its IHDR chunk follows at byte 12).
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What a mask holds: "binary" 0/255 (the portrait blog's), or "classes", class ids 0..N-1
# plus one ignore index (transforms/codecs/class_mask.py). Declared here, import-free, for the CLI.
MASK_TYPES = ("binary", "classes")
DEFAULT_MASK_TYPE = "binary"
DEFAULT_IGNORE_INDEX = 255  # Pascal VOC, Cityscapes trainIds, ADE20K (reduced), mmseg
MAX_CLASS_ID = 65535  # the largest id a 16-bit PNG holds
# COCO pixels no annotation covers: class 0 "background", or the ignore index (COCO-Stuff).
COCO_UNLABELED = ("background", "ignore")
DEFAULT_COCO_UNLABELED = "background"
# Stored mask pixel values: background 0, foreground 255; readers threshold at 128.
MASK_FOREGROUND = 255
MASK_THRESHOLD = 128
# A stored JPEG mask decodes clean when every pixel lies within this of 0 or 255 (verify's
# check; encode_mask's test of each quality, with the fast and the accurate decoders).
JPEG_MASK_MARGIN = 64


def class_png_bit_depth(ignore_index: int) -> int:
    """Bit depth of stored class-id PNGs: 8 when every value (ids < ignore index) fits a byte.

    Writer and readers both derive it from here, so metadata.json cannot claim another.
    """
    return 8 if ignore_index <= 255 else 16
