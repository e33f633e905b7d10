"""Parse serialized records and decode image and mask, entirely in TensorFlow ops.

Decoding stops at uint8 on purpose: float32 pixels are four times the bytes, so they are
made once per batch (`convert`) instead of per record and then copied again by `batch`.

With a target `image_size`, JPEGs are decoded at reduced resolution by libjpeg's scaled
IDCT (`decode_jpeg(ratio=2|4|8)`: the largest ratio whose output still covers the target),
and the rest of the way by area averaging. A binary mask goes through the same two steps,
then is thresholded at half: a pixel is foreground when at least half of the source area it
covers is, the pixel the image shows at that spot. Nearest-neighbour would be cheaper but
samples one source pixel per output pixel: it shifts boundaries by up to half a block and
drops thin parts, so the mask would disagree with the averaged image along every edge.

Class-id masks (metadata.json `classes`) are the exception: an average of two class ids is
a third, unrelated class, so they are resized by nearest neighbour only, and never
thresholded. They come out as uint8, or int32 when stored as 16-bit PNGs (ids above 255).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from shard_reader import resizing
from transforms.format import features
from transforms.format.dataset_info import ClassesInfo

Decoded = tuple[tf.Tensor, ...]  # (image, mask) or (image, mask, key)
Size = tuple[int, int]

# For uint8 grey levels, level >> 7 is 1 exactly when level >= 128 (features.MASK_THRESHOLD).
THRESHOLD_SHIFT = 7
# libjpeg scales the IDCT by 1/2, 1/4 or 1/8 (tf.io.decode_jpeg `ratio`); 1 is full size.
DCT_RATIOS = (1, 2, 4, 8)

# The whole record schema, for tools that check every feature (segprep verify, inspect).
FEATURE_SPEC = {
    features.IMAGE: tf.io.FixedLenFeature([], tf.string),
    features.MASK: tf.io.FixedLenFeature([], tf.string),
    features.KEY: tf.io.FixedLenFeature([], tf.string),
    features.HEIGHT: tf.io.FixedLenFeature([], tf.int64),
    features.WIDTH: tf.io.FixedLenFeature([], tf.int64),
}


def feature_spec(with_keys: bool) -> dict[str, tf.io.FixedLenFeature]:
    """Only the features the reader uses: height/width are implied by the decoded pixels."""
    names = [features.IMAGE, features.MASK] + ([features.KEY] if with_keys else [])
    return {name: FEATURE_SPEC[name] for name in names}


def scaled_size(size: Size, ratio: int) -> Size:
    """What libjpeg's scaled IDCT yields for a `size` image: each side rounded up."""
    return (-(-size[0] // ratio), -(-size[1] // ratio))


def dct_ratio(stored: Size, target: Size) -> int:
    """The largest DCT ratio whose decoded size still covers `target` on both sides."""

    def covers(ratio: int) -> bool:
        height, width = scaled_size(stored, ratio)
        return height >= target[0] and width >= target[1]

    fitting = [ratio for ratio in DCT_RATIOS if covers(ratio)]
    return max(fitting, default=1)


def make_decoder(
    mask_format: str,
    image_shape: Size | None,
    with_keys: bool = False,
    image_size: Size | None = None,
    classes: ClassesInfo | None = None,
    resize: str = resizing.STRETCH,
) -> Callable[[tf.Tensor], Decoded]:
    """serialized -> (image uint8 [H,W,3], mask [H,W,1][, key]).

    A binary mask is uint8 0 or 1, thresholded at 128 (the writer checked that JPEG masks
    survive exactly this) right after decoding, while it is in cache and a quarter of its
    float32 size. With `classes`, the mask is the stored class ids (and ignore index) in
    `classes.mask_dtype`. With a uniform `image_shape` the shapes are static and checked
    against the pixels, so a record that disagrees with metadata.json fails loudly instead of
    breaking a batch later. With `image_size` (height, width) both come out at that size,
    shapes static: stretched, or with resize="fit" scaled with the aspect ratio kept and
    padded (shard_reader.resizing): the image with 0, class ids with the ignore index, a
    0/1 mask with 0.
    """
    if mask_format not in features.MASK_FORMATS:
        raise ValueError(f"unknown mask format {mask_format!r}")
    mask = _BinaryMask(mask_format) if classes is None else _ClassMask(classes)
    spec = feature_spec(True)  # the key names a record that fails a check
    fit = image_size is not None and resize == resizing.FIT
    if image_size is None:
        pixels = _full_size(mask, image_shape)
    elif image_shape is None:
        pixels = _resized_any_size(mask, image_size, fit)
    elif fit:
        inner = resizing.fit_geometry(image_shape, image_size)
        inner_size = (inner.height, inner.width)
        if inner_size == tuple(image_shape):
            pixels = _full_size(mask, image_shape)
        else:
            pixels = _resized(mask, image_shape, inner_size)
    else:
        pixels = _resized(mask, image_shape, image_size)
    mask_fill = 0 if classes is None else classes.ignore_index

    def decode(serialized: tf.Tensor, shard: tf.Tensor | None = None) -> Decoded:
        """`shard`: the path of the shard the record comes from, named with the record's
        key in every refusal (make_dataset passes it; the cache holds decoded examples)."""
        parsed = tf.io.parse_single_example(serialized, spec)
        where = record_where(parsed[features.KEY], shard)
        image, mask_pixels = pixels(parsed[features.IMAGE], parsed[features.MASK], where)
        values = mask.finish(mask_pixels)
        if fit:
            image, values = _pad(image, image_size, 0), _pad(values, image_size, mask_fill)
        return (image, values, parsed[features.KEY]) if with_keys else (image, values)

    return decode


def _threshold(grey: tf.Tensor) -> tf.Tensor:
    """0/1 uint8 mask from grey levels 0..255.

    Decoded levels are integers, and >= 128 is the threshold the writer verified; averaged
    (area-resized) levels count a pixel at least half covered by foreground as foreground,
    the same rule on integers (127.5 < 128).
    """
    if grey.dtype == tf.uint8:
        # One pass instead of a compare and a cast (TF's casts are scalar loops).
        return tf.bitwise.right_shift(grey, tf.constant(THRESHOLD_SHIFT, tf.uint8))
    return tf.cast(grey >= features.MASK_FOREGROUND / 2, tf.uint8)


Pixels = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


class _BinaryMask:
    """0/255 grey masks: decoded (JPEG at the image's DCT scale), area-resized, thresholded."""

    def __init__(self, mask_format: str) -> None:
        self.mask_format = mask_format
        self.scales = mask_format == "jpeg"  # libjpeg's scaled IDCT applies

    def decode(self, data: tf.Tensor, ratio: int = 1) -> tf.Tensor:
        """Grey mask [h,w,c] (0..255), c as stored (`as_stored` checks it is 1); PNG has no
        scaled decoding, so it comes at full size."""
        if self.mask_format == "png":
            return tf.io.decode_png(data, channels=0)
        return tf.io.decode_jpeg(data, channels=0, ratio=ratio)

    def resize(self, grey: tf.Tensor, size: Size) -> tf.Tensor:
        return _area(grey, size)

    def finish(self, grey: tf.Tensor) -> tf.Tensor:
        return _threshold(grey)


# Bytes 12..15 of a PNG are its first chunk's type, always IHDR; bytes 24 and 25 are the
# image's bit depth and colour type (0: grey).
_PNG_IHDR = (12, 4, b"IHDR")
_PNG_DEPTH_AND_TYPE = (24, 2)
_PNG_GREY = 0


class _ClassMask:
    """Class-id PNGs: decoded at the bit depth metadata.json gives, resized by nearest
    neighbour, never thresholded; 16-bit ids widened to int32."""

    scales = False  # PNG: always decoded at full size

    def __init__(self, classes: ClassesInfo) -> None:
        self.depth = classes.png_bit_depth
        self.dtype = tf.as_dtype(classes.mask_dtype)

    def decode(self, data: tf.Tensor, ratio: int = 1) -> tf.Tensor:
        """Ids [h,w,1]. decode_png(dtype=...) rescales a PNG of another bit depth instead of
        failing (an 8-bit id 3 would read as 771), so the header is checked first."""
        start, length, chunk = _PNG_IHDR
        header = tf.strings.join(
            [tf.strings.substr(data, start, length), tf.strings.substr(data, *_PNG_DEPTH_AND_TYPE)]
        )
        tf.debugging.assert_equal(
            header,
            tf.constant(chunk + bytes([self.depth, _PNG_GREY])),
            message=f"class mask is not a {self.depth}-bit grey PNG, as metadata.json says",
        )
        ids = tf.io.decode_png(data, channels=1, dtype=tf.uint8 if self.depth == 8 else tf.uint16)
        return ids if ids.dtype == self.dtype else tf.cast(ids, self.dtype)

    def resize(self, ids: tf.Tensor, size: Size) -> tf.Tensor:
        # Nearest keeps the dtype and yields only ids the mask holds (half-pixel centres).
        return tf.image.resize(ids, size, method=tf.image.ResizeMethod.NEAREST_NEIGHBOR)

    def finish(self, ids: tf.Tensor) -> tf.Tensor:
        return ids


_Mask = _BinaryMask | _ClassMask


def record_where(key: tf.Tensor, shard: tf.Tensor | None) -> tf.Tensor:
    """'k000 in shard PATH': the record (its key) and the shard, for a refusal's message."""
    if shard is None:
        return key
    return tf.strings.join([key, " in shard ", shard])


_JPEG_SOI = b"\xff\xd8\xff"  # every JPEG's first bytes: start of image, then a marker


def jpeg_image(data: tf.Tensor, where: tf.Tensor) -> tf.Tensor:
    """`data`, once its first bytes are a JPEG's, else an InvalidArgumentError naming the
    record and shard: TensorFlow's decoders take a PNG (or GIF, BMP) where the JPEG belongs,
    and extract_jpeg_shape, which the resizing paths read first, fails with "Invalid JPEG
    data or crop window" naming neither. A comparison of 3 bytes per record."""
    is_jpeg = tf.equal(tf.strings.substr(data, 0, len(_JPEG_SOI)), _JPEG_SOI)
    found = tf.where(
        tf.equal(tf.strings.substr(data, 0, len(features.PNG_SIGNATURE)), features.PNG_SIGNATURE),
        "a PNG",
        "not a JPEG",
    )
    check = tf.debugging.Assert(
        is_jpeg, ["record with key", where, ": image is", found, ", expected a 3-channel JPEG"]
    )
    with tf.control_dependencies([check]):
        return tf.identity(data)


def as_stored(pixels: tf.Tensor, channels: int, what: str, key: tf.Tensor) -> tf.Tensor:
    """`pixels` decoded with channels=0 (the channels its header states), refused unless they
    are `channels`. Decoding with channels=3 or 1 converts whatever is stored, so an image
    and mask exchanged in a record would be served as a grey "photo" and a thresholded
    photo; the check costs a shape comparison, not a second header parse."""
    found = tf.shape(pixels)[-1]
    check = tf.debugging.Assert(
        tf.equal(found, channels),
        ["record with key", key, f": {what} has", found, f"channels, expected {channels}"],
    )
    with tf.control_dependencies([check]):
        return tf.ensure_shape(tf.identity(pixels), [None, None, channels])


def of_shape(pixels: tf.Tensor, image_shape: Size, what: str, key: tf.Tensor) -> tf.Tensor:
    """`pixels`, refused naming the record and shard unless they are metadata.json's
    `image_shape`: ensure_shape alone said "Shape of tensor EnsureShape [800,600,3] is not
    compatible with expected shape [600,800,3]", naming neither."""
    found = tf.shape(pixels)[:2]
    check = tf.debugging.Assert(
        tf.reduce_all(tf.equal(found, tf.constant(image_shape, tf.int32))),
        [
            "record with key",
            key,
            f": {what} is",
            found,
            f"(HxW), metadata.json image_shape is {list(image_shape)}",
        ],
    )
    with tf.control_dependencies([check]):
        return tf.identity(pixels)


def _full_size(mask: _Mask, image_shape: Size | None) -> Pixels:
    def pixels(image_data: tf.Tensor, mask_data: tf.Tensor, key: tf.Tensor) -> Decoded:
        image_data = jpeg_image(image_data, key)
        image = as_stored(tf.io.decode_jpeg(image_data, channels=0), 3, "image", key)
        mask_pixels = as_stored(mask.decode(mask_data), 1, "mask", key)
        if image_shape is not None:
            image = tf.ensure_shape(of_shape(image, image_shape, "image", key), [*image_shape, 3])
            mask_pixels = of_shape(mask_pixels, image_shape, "mask", key)
            return image, tf.ensure_shape(mask_pixels, [*image_shape, 1])
        tf.debugging.assert_equal(
            tf.shape(image)[:2], tf.shape(mask_pixels)[:2], message="image and mask sizes differ"
        )
        return image, mask_pixels

    return pixels


def _area(pixels: tf.Tensor, size: Size) -> tf.Tensor:
    """Area-averaged float32 pixels at `size` (each output pixel: the mean of what it covers)."""
    return tf.image.resize(pixels, size, method=tf.image.ResizeMethod.AREA)


def _to_uint8(image: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.round(image), tf.uint8)


def _resized(mask: _Mask, image_shape: Size, image_size: Size) -> Pixels:
    """Uniform stored size: the DCT ratio and every intermediate shape are known up front."""
    ratio = dct_ratio(image_shape, image_size)
    decoded = scaled_size(image_shape, ratio)
    mask_ratio = ratio if mask.scales else 1
    mask_decoded = scaled_size(image_shape, mask_ratio)

    def pixels(image_data: tf.Tensor, mask_data: tf.Tensor, key: tf.Tensor) -> Decoded:
        image_data = jpeg_image(image_data, key)
        # Scaled decoding only checks the size to within the ratio: read the header too.
        tf.debugging.assert_equal(
            tf.io.extract_jpeg_shape(image_data)[:2],
            tf.constant(image_shape, tf.int32),
            message="image size differs from metadata.json image_shape",
        )
        image = tf.io.decode_jpeg(image_data, channels=0, ratio=ratio)
        image = tf.ensure_shape(as_stored(image, 3, "image", key), [*decoded, 3])
        mask_pixels = as_stored(mask.decode(mask_data, mask_ratio), 1, "mask", key)
        mask_pixels = tf.ensure_shape(mask_pixels, [*mask_decoded, 1])
        if decoded != image_size:
            image = _to_uint8(_area(image, image_size))
        if mask_decoded != image_size:
            mask_pixels = mask.resize(mask_pixels, image_size)
        return image, mask_pixels

    return pixels


def _fit_inner(stored: tf.Tensor, image_size: Size) -> tf.Tensor:
    """resizing.fit_geometry's scaled size, in the same integer arithmetic, per record."""
    height, width = stored[0], stored[1]
    target_height, target_width = (tf.constant(side, tf.int32) for side in image_size)
    by_height = tf.stack([target_height, (2 * width * target_height + height) // (2 * height)])
    by_width = tf.stack([(2 * height * target_width + width) // (2 * width), target_width])
    inner = tf.where(target_height * width <= target_width * height, by_height, by_width)
    return tf.clip_by_value(inner, 1, tf.constant(image_size, tf.int32))


def _pad(pixels: tf.Tensor, image_size: Size, value: int) -> tf.Tensor:
    """`pixels` centred in `image_size`, the rest `value` (odd pixels bottom and right)."""
    missing = tf.constant(image_size, tf.int32) - tf.shape(pixels)[:2]
    before = missing // 2
    paddings = tf.stack([before, missing - before], axis=1)
    paddings = tf.concat([paddings, tf.zeros([1, 2], tf.int32)], axis=0)
    padded = tf.pad(pixels, paddings, constant_values=tf.cast(value, pixels.dtype))
    return tf.ensure_shape(padded, [*image_size, pixels.shape[-1]])


def _resized_any_size(mask: _Mask, image_size: Size, fit: bool = False) -> Pixels:
    """Sizes vary per record: the ratio is picked per record from the JPEG header. With
    `fit`, the target is the record's own scaled size (padded later), not image_size."""

    def pixels(image_data: tf.Tensor, mask_data: tf.Tensor, key: tf.Tensor) -> Decoded:
        image_data = jpeg_image(image_data, key)
        stored = tf.io.extract_jpeg_shape(image_data)[:2]
        target = _fit_inner(stored, image_size) if fit else tf.constant(image_size, tf.int32)
        # Ratios that fit form a prefix of DCT_RATIOS (output shrinks as the ratio grows).
        fits = [tf.reduce_all(-(-stored // ratio) >= target) for ratio in DCT_RATIOS[1:]]
        index = tf.add_n([tf.cast(fit, tf.int32) for fit in fits])

        def by_ratio(decode: Callable[[int], tf.Tensor]) -> tf.Tensor:
            return tf.switch_case(index, [lambda r=r: decode(r) for r in DCT_RATIOS])

        image = by_ratio(lambda r: tf.io.decode_jpeg(image_data, channels=0, ratio=r))
        image = as_stored(image, 3, "image", key)
        if mask.scales:
            mask_pixels = by_ratio(lambda r: mask.decode(mask_data, r))
            mask_stored = tf.io.extract_jpeg_shape(mask_data)[:2]
        else:
            mask_pixels = mask.decode(mask_data)
            mask_stored = tf.shape(mask_pixels)[:2]
        mask_pixels = as_stored(mask_pixels, 1, "mask", key)
        tf.debugging.assert_equal(stored, mask_stored, message="image and mask sizes differ")
        if fit:  # shapes vary until padded
            return _to_uint8(_area(image, target)), mask.resize(mask_pixels, target)
        image = tf.ensure_shape(_to_uint8(_area(image, image_size)), [*image_size, 3])
        return image, tf.ensure_shape(mask.resize(mask_pixels, image_size), [*image_size, 1])

    return pixels


OUTPUT_DTYPES = (tf.float32, tf.uint8)


def convert(
    image: tf.Tensor, mask: tf.Tensor, dtype: tf.DType, class_ids: bool = False
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decoded uint8 image (0..255) and mask -> `dtype`; one record or a whole batch.

    A 0/1 mask follows the image's dtype (as it always has); class ids never do: a float
    id is no valid label for a loss or one_hot, and float32 would be 4x the bytes.
    """
    if dtype == tf.uint8:
        return image, mask
    return tf.cast(image, dtype), mask if class_ids else tf.cast(mask, dtype)
