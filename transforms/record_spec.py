"""RecordSpec: everything that shapes a stored record, decided once and compared with `==`.

The run plan builds one spec from the flags; the writer makes records from it, the commit
stores it in metadata.json (`record_spec`), an append compares the stored spec with its
own and names each field that differs, and verify checks every record against it. A flag
that changes how records are written is a field here, its flag, and its effect where the
record is made (transforms/record.py): nothing else needs to know it exists.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from transforms.codecs.class_mask import ClassMaskSettings
from transforms.format import record_formats
from transforms.settings_error import SettingError

MIN_IMAGE_SIDE = 16  # below it a downscaled image holds too little to learn from


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    """What a record of this output is; two outputs' records read alike when specs are ==."""

    classes: ClassMaskSettings = dataclasses.field(default_factory=ClassMaskSettings)
    mask_format: str = "jpeg"  # binary masks: how they are stored (class masks: PNG)
    mask_key: str | None = None  # .mat masks: the variable read
    record_format: str = record_formats.DEFAULT
    # --max_image_side: an image whose longer side exceeds it is downscaled (Lanczos,
    # re-encoded as JPEG at transforms.codecs.image.TRANSCODE_QUALITY), its mask with
    # nearest neighbour; None: every image is stored at its own size.
    max_image_side: int | None = None

    def __post_init__(self) -> None:
        side = self.max_image_side
        if side is not None and not (type(side) is int and MIN_IMAGE_SIDE <= side):
            raise SettingError(
                f"{{max_image_side}} must be an integer of at least {MIN_IMAGE_SIDE}"
            )

    @classmethod
    def from_flags(cls, flags: Any, classes: ClassMaskSettings, mask_format: str) -> RecordSpec:
        """The spec of a run: the resolved classes and mask format, the rest read from the
        flags of the same names (a flag absent from `flags` keeps the field's default)."""
        resolved = {"classes": classes, "mask_format": mask_format}
        values = {
            field.name: getattr(flags, field.name)
            for field in dataclasses.fields(cls)
            if field.name not in resolved and getattr(flags, field.name, None) is not None
        }
        return cls(**resolved, **values)

    def stored(self) -> dict[str, Any]:
        """metadata.json's `record_spec`: every field, classes spelled out."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            if field.name == "classes":
                out.update(_stored_classes(self.classes))
            else:
                out[field.name] = getattr(self, field.name)
        return out


def stored_spec(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The stored spec of an output's metadata.json: its `record_spec`, or, for an output
    written before specs were stored, the same fields gathered from where it kept them."""
    spec = metadata.get("record_spec")
    if isinstance(spec, Mapping):
        if "class_map" not in spec:  # stored before the spec held it: the classes section did
            spec = {**spec, "class_map": _class_map(metadata)}
        return {**RecordSpec().stored(), **spec}
    used = metadata.get("parameters") or {}
    classes = metadata.get("classes") or {}
    stored = RecordSpec().stored()
    stored.update(
        mask_type=used.get("mask_type", "binary"),
        mask_format=metadata.get("mask_format", "jpeg"),
        mask_key=used.get("mask_key"),
        record_format=metadata.get("record_format", record_formats.DEFAULT),
    )
    if classes:
        stored.update(
            num_classes=classes.get("num_classes"),
            ignore_index=classes.get("ignore_index"),
            class_names=classes.get("names") or None,
            colormap=classes.get("colormap") or None,
            class_map=_class_map(metadata),
        )
    return stored


def _class_map(metadata: Mapping[str, Any]) -> Any:
    classes = metadata.get("classes")
    found = classes.get("class_map") if isinstance(classes, Mapping) else None
    return found.get("map") if isinstance(found, Mapping) else None


def differences_from_stored(metadata: Mapping[str, Any], spec: RecordSpec) -> list[str]:
    """An append's check: each field where this run's spec differs from the output's."""
    return field_differences(stored_spec(metadata), spec.stored())


def record_problems(stored: Mapping[str, Any], height: int, width: int) -> list[str]:
    """How a stored record of this size breaks the stored spec (verify checks each record)."""
    side = stored.get("max_image_side")
    if isinstance(side, int) and max(height, width) > side:
        return [f"stored image is {height}x{width} (HxW), over max_image_side {side}"]
    return []


def field_differences(stored: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    return [
        f"{name}: output {_show(stored.get(name))}, this run {_show(ours.get(name))}"
        for name in dict.fromkeys([*stored, *ours])
        if stored.get(name) != ours.get(name)
    ]


def _stored_classes(classes: ClassMaskSettings) -> dict[str, Any]:
    is_classes = classes.is_classes
    return {
        "mask_type": classes.mask_type,
        "num_classes": classes.num_classes if is_classes else None,
        "ignore_index": classes.ignore_index if is_classes else None,
        "class_names": list(classes.class_names) if classes.class_names else None,
        "colormap": [list(c) for c in classes.colormap] if classes.colormap else None,
        # source id -> stored id: two runs whose maps differ store different ids for one mask
        "class_map": classes.class_map.to_json()["map"] if classes.class_map else None,
    }


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
