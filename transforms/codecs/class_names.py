"""The class names public datasets define, by class id, as presets of --class_names (and the
names the --class_map presets carry), so a summary, a report and metadata.json name classes
as the dataset does instead of `class 0`."""

from __future__ import annotations

# Pascal VOC 2012 (the devkit's VOCcode/VOCinit.m), background first: 21 classes.
VOC = (
    "background aeroplane bicycle bird boat bottle bus car cat chair cow diningtable dog "
    "horse motorbike person pottedplant sheep sofa train tvmonitor"
).split()

# Cityscapes' 19 trainIds (cityscapesScripts helpers/labels.py), in trainId order.
CITYSCAPES = (
    "road",
    "sidewalk",
    "building",
    "wall",
    "fence",
    "pole",
    "traffic light",
    "traffic sign",
    "vegetation",
    "terrain",
    "sky",
    "person",
    "rider",
    "car",
    "truck",
    "bus",
    "train",
    "motorcycle",
    "bicycle",
)

# ADE20K's 150 SceneParsing classes (objectInfo150), by id after reduce-zero (0 = wall):
# each is the first name of the dataset's own entry.
ADE20K = (
    "wall|building|sky|floor|tree|ceiling|road|bed|windowpane|grass|cabinet|sidewalk|person|"
    "earth|door|table|mountain|plant|curtain|chair|car|water|painting|sofa|shelf|house|sea|"
    "mirror|rug|field|armchair|seat|fence|desk|rock|wardrobe|lamp|bathtub|railing|cushion|"
    "base|box|column|signboard|chest of drawers|counter|sand|sink|skyscraper|fireplace|"
    "refrigerator|grandstand|path|stairs|runway|case|pool table|pillow|screen door|stairway|"
    "river|bridge|bookcase|blind|coffee table|toilet|flower|book|hill|bench|countertop|stove|"
    "palm|kitchen island|computer|swivel chair|boat|bar|arcade machine|hovel|bus|towel|light|"
    "truck|tower|chandelier|awning|streetlight|booth|television receiver|airplane|dirt track|"
    "apparel|pole|land|bannister|escalator|ottoman|bottle|buffet|poster|stage|van|ship|"
    "fountain|conveyer belt|canopy|washer|plaything|swimming pool|stool|barrel|basket|"
    "waterfall|tent|bag|minibike|cradle|oven|ball|food|step|tank|trade name|microwave|pot|"
    "animal|bicycle|lake|dishwasher|screen|blanket|sculpture|hood|sconce|vase|traffic light|"
    "tray|ashcan|fan|pier|crt screen|plate|monitor|bulletin board|shower|radiator|glass|"
    "clock|flag"
).split("|")

# Oxford-IIIT Pet trimaps through the oxford_pet_trimap map: background 0, pet 1.
OXFORD_PET = ("background", "pet")

PRESETS: dict[str, tuple[str, ...]] = {
    "voc": tuple(VOC),
    "cityscapes": CITYSCAPES,
    "ade20k": tuple(ADE20K),
    "oxford_pet": OXFORD_PET,
}
