"""Full-size against 1/8-scale JPEG validation: the same verdict on every corrupted photo?

    python benchmarks/jpeg_fuzz.py                        # 1,200 cases of generated photos
    python benchmarks/jpeg_fuzz.py --photos a.jpg b.jpg   # real photos too
    python benchmarks/jpeg_fuzz.py --count 5000 --seed 3

validate_image checks a JPEG it keeps as it is by decoding it at 1/8 scale (libjpeg still
entropy-decodes every coefficient). This runs both checks on each corruption of
tests/jpeg_corruptions.py (bit flips, truncation, inserted and deleted bytes, broken
markers) and prints, per kind, how many files each check accepted or rejected and for which
reason, and every case where the two differ: the accept/reject verdict, the reject reason,
and for accepted files the stored bytes and size. Both runs are repeated with Pillow's
ImageFile.LOAD_TRUNCATED_IMAGES on, in case an embedding program sets it. Exit 1 on any
difference. The base photos: five 800x600 sample portraits encoded as cameras and tools do
(baseline 4:2:0, 4:4:4, progressive, optimised 4:2:2, restart markers) plus any --photos.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

from PIL import ImageFile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.jpeg_corruptions import KINDS, cases, generated_jpegs, verdict  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1200, help="corrupted files (1,200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--photos", nargs="*", default=[], help="real JPEG photos to add")
    args = parser.parse_args()
    photos = generated_jpegs(args.seed, 800, 600)
    for path in args.photos:
        photos[Path(path).name] = Path(path).read_bytes()
    print(f"{len(photos)} base photos: {', '.join(sorted(photos))}")
    differences = 0
    for truncated_ok in (False, True):
        ImageFile.LOAD_TRUNCATED_IMAGES = truncated_ok
        differences += _run(photos, args.count, args.seed, truncated_ok)
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    print("IDENTICAL verdicts on every case" if not differences else f"{differences} DIFFER")
    return 1 if differences else 0


def _run(photos: dict[str, bytes], count: int, seed: int, truncated_ok: bool) -> int:
    table: collections.Counter = collections.Counter()
    seconds = {False: 0.0, True: 0.0}
    differing = []
    for case in cases(photos, count, seed):
        outcomes = {}
        for scaled in (False, True):
            start = time.process_time()
            outcomes[scaled] = verdict(case.data, scaled_check=scaled)
            seconds[scaled] += time.process_time() - start
        full, scaled = outcomes[False], outcomes[True]
        table[case.kind, _label(full), "full"] += 1
        table[case.kind, _label(scaled), "scaled"] += 1
        if full != scaled:
            differing.append((case, full, scaled))
    print(f"\nLOAD_TRUNCATED_IMAGES = {truncated_ok}: {count} cases")
    labels = sorted({label for _, label, _ in table})
    print(f"{'kind':10s}" + "".join(f"{label:>22s}" for label in labels))
    for kind in KINDS:
        cells = (
            f"{table[kind, label, 'full']} / {table[kind, label, 'scaled']}" for label in labels
        )
        print(f"{kind:10s}" + "".join(f"{cell:>22s}" for cell in cells))
    print("(each cell: full-size decode / 1/8-scale decode)")
    for case, full, scaled in differing:
        print(f"  DIFFERS {case.photo} {case.kind} ({case.description}): {full} vs {scaled}")
    print(
        f"CPU: full {seconds[False] * 1000 / count:.2f} ms, "
        f"scaled {seconds[True] * 1000 / count:.2f} ms per corrupted file"
    )
    return len(differing)


def _label(outcome: tuple) -> str:
    return "accept" if outcome[0] == "accept" else outcome[1]


if __name__ == "__main__":
    sys.exit(main())
