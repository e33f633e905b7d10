"""`segprep report`: the page, opened in a real browser (headless Chromium from Debian).

Chromium dumps the DOM it built and takes a screenshot; its NetLog records every request
it made. `make test` installs the Debian package when it is missing, so CI always runs this.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beam_pipeline.cli import main
from tests.helpers.class_outputs import write_coco_set
from tests.helpers.images import rgb_jpeg

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="headless Chromium is not installed (make test installs it)",
)


class _Dom(html.parser.HTMLParser):
    """Elements as (tag, attributes, text inside) from Chromium's serialised DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[int] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs), []))
        if tag not in ("img", "meta", "br", "rect", "input"):
            self._open.append(len(self.elements) - 1)

    def handle_endtag(self, tag):
        while self._open:
            if self.elements[self._open.pop()][0] == tag:
                break

    def handle_data(self, data):
        for index in self._open:
            self.elements[index][2].append(data)

    def find(self, tag=None, **attrs):
        return [
            (t, a, "".join(text))
            for t, a, text in self.elements
            if (tag is None or t == tag)
            and all(
                a.get(name.rstrip("_").replace("_", "-")) == value for name, value in attrs.items()
            )
        ]


def _attribute(name: str) -> str:
    """`class_` -> `class`, `data_split` -> `data-split`."""
    return name.rstrip("_").replace("_", "-")


def _browse(page: Path, tmp_path: Path) -> tuple[_Dom, Image.Image, list[str]]:
    """(DOM, screenshot, URLs requested) of the page as headless Chromium renders it."""
    assert CHROMIUM is not None, "CI must have chromium: make test installs it"
    netlog = tmp_path / "netlog.json"
    shot = tmp_path / "shot.png"
    common = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        # Nothing may leave the machine, not even Chromium's own update and account pings:
        # names resolve to nothing and every connection goes to a closed loopback port.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=127.0.0.1:9",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1200,2400",
    ]
    url = page.resolve().as_uri()
    dom = subprocess.run(
        [*common, f"--log-net-log={netlog}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    subprocess.run(
        [*common, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True
    )
    parser = _Dom()
    parser.feed(dom)
    return parser, Image.open(shot).convert("RGB"), _page_requests(netlog)


def _page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked for: requests made on behalf of a file:// document.

    Chromium's own service requests carry the initiator "not an origin"; a page's carry
    the page's network isolation key, which for a file is "file://".
    """
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return sorted(
        event["params"]["url"]
        for event in log["events"]
        if event.get("type") == start
        and str(event["params"].get("network_isolation_key", "")).startswith("file://")
    )


def _report(out: Path, page: Path) -> str:
    code = main(["report", str(out), "--out", str(page)])
    assert code == 0 and page.is_file()
    return page.read_text()


def _assert_not_blank(shot: Image.Image) -> None:
    pixels = np.asarray(shot)
    assert pixels.std() > 20, "the screenshot is (nearly) one colour"
    assert len(np.unique(pixels.reshape(-1, 3)[::97], axis=0)) > 50


def _only_local(urls: list[str]) -> None:
    remote = [url for url in urls if not url.startswith(("file:", "data:", "about:"))]
    assert not remote, f"the page made network requests: {remote}"


def test_binary_output_page_in_a_real_browser(prepared, tmp_path, capsys):
    out, _ = prepared
    page = tmp_path / "binary.html"
    _report(out, page)
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(page)
    dom, shot, urls = _browse(page, tmp_path)
    metadata = json.loads((out / "metadata.json").read_text())
    for section in ("overview", "images", "samples", "rejects", "duplicates", "shards"):
        assert dom.find("section", id=section), section
    assert not dom.find("section", id="classes")  # binary masks: no class section
    accepted = sum(split["num_examples"] for split in metadata["splits"].values())
    assert dom.find(data_count="accepted")[0][2] == f"{accepted:,}"
    assert dom.find(data_count="rejected")[0][2] == str(metadata["num_rejected"]["total"])
    for name, split in metadata["splits"].items():
        assert dom.find(data_split=name)[0][2] == f"{split['num_examples']:,}"
        rows = dom.find("table", class_="shards", data_split=name)[0][2]
        assert all(shard["sha256"] in rows for shard in split["shards"])
    reasons = {a["data-reason"] for _, a, _ in dom.find("tr", class_="reject-reason")}
    assert reasons == set(metadata["num_rejected"]["by_reason"])
    assert dom.find("div", class_="foreground")  # the foreground distribution
    assert len(dom.find("img", alt="mask overlay")) >= 2
    _assert_not_blank(shot)
    _only_local(urls)


def test_the_request_check_sees_a_page_that_loads_from_the_network(tmp_path):
    """The check above can fail: a page with one remote image is caught."""
    page = tmp_path / "remote.html"
    page.write_text('<html><body><img src="http://example.invalid/x.png"></body></html>')
    _, _, urls = _browse(page, tmp_path)
    assert urls == ["http://example.invalid/x.png"]


def test_class_output_page_has_a_bar_per_class(class_outputs, tmp_path):
    out = class_outputs["8-bit"].directory
    page = tmp_path / "classes.html"
    _report(Path(out), page)
    dom, shot, urls = _browse(page, tmp_path)
    metadata = json.loads((Path(out) / "metadata.json").read_text())
    num_classes = metadata["classes"]["num_classes"]
    assert dom.find("section", id="classes")
    for split in metadata["splits"]:
        table = dom.find("table", class_="classes", data_split=split)
        assert table, split
    bars = [a for t, a, _ in dom.find("g", class_="bar")]
    labels = {a["data-label"] for a in bars}
    names = metadata["classes"].get("names") or [f"class {i}" for i in range(num_classes)]
    assert set(names) <= labels
    rows = dom.find("tr", class_="class-row")
    assert len(rows) == num_classes * len(metadata["classes"]["splits"])
    _assert_not_blank(shot)
    _only_local(urls)


def test_coco_output_and_hostile_keys_are_text(tmp_path):
    images = tmp_path / "images"
    annotations = tmp_path / "coco.json"
    write_coco_set(images, annotations)
    hostile = images / "<script>alert(1)<"
    hostile.mkdir()
    (hostile / "script>.jpg").write_bytes(rgb_jpeg(40, 50, seed=5))  # no record: a reject
    out = tmp_path / "out"
    code = main(
        [
            "prepare",
            "--image_dir",
            str(images),
            "--coco_annotations",
            str(annotations),
            "--mask_type",
            "classes",
            "--output_dir",
            str(out),
            "--runner",
            "FnApiRunner",
        ]
    )
    assert code == 0
    page = tmp_path / "coco.html"
    text = _report(out, page)
    assert "<script>alert(1)</script>" not in text
    dom, _, urls = _browse(page, tmp_path)
    assert not dom.find("script")  # escaped: no script element exists in the DOM
    keys = "".join(t for _, _, t in dom.find("div", class_="key"))
    assert "<script>alert(1)</script>" in keys  # shown as text
    assert dom.find("section", id="classes")
    _only_local(urls)


def test_refused_run_reports_its_staged_rejects(sample_dataset, tmp_path):
    out = tmp_path / "out"
    code = main(
        [
            "prepare",
            "--image_dir",
            str(sample_dataset.image_dir),
            "--mask_dir",
            str(sample_dataset.mask_dir),
            "--output_dir",
            str(out),
            "--max_reject_fraction",
            "0.01",
            "--runner",
            "FnApiRunner",
        ]
    )
    assert code != 0 and not (out / "metadata.json").exists()
    page = tmp_path / "refused.html"
    _report(out, page)
    dom, _, _ = _browse(page, tmp_path)
    assert dom.find(id="refused")
    assert dom.find("tr", class_="reject-reason")


def test_not_an_output_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a segprep output" in err


def test_unlabeled_images_are_counted_on_the_page(sample_dataset, tmp_path):
    out = tmp_path / "out"
    argv = ["prepare", "--image_dir", str(sample_dataset.image_dir), "--mask_dir"]
    argv += [str(sample_dataset.mask_dir), "--output_dir", str(out), "--runner", "FnApiRunner"]
    assert main([*argv, "--unlabeled_images", "skip"]) == 0
    unlabeled = json.loads((out / "metadata.json").read_text())["num_unlabeled"]["total"]
    assert unlabeled > 0
    text = _report(out, tmp_path / "unlabeled.html")
    assert f'data-count="unlabeled">{unlabeled:,}<' in text


def test_a_fifo_as_rejects_jsonl_is_one_line_not_a_hang(prepared, tmp_path, capsys):
    """Only a regular file is read: a FIFO in rejects.jsonl's place is refused at once."""
    import os
    import shutil

    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    (out / "rejects.jsonl").unlink()
    os.mkfifo(out / "rejects.jsonl")
    assert main(["report", str(out), "--out", str(tmp_path / "page.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rejects.jsonl" in err, err


def test_a_shard_that_fails_while_sampled_is_said_on_the_page(prepared, tmp_path):
    """A flipped byte in a shard made the page sample fewer records and say nothing."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    meta = json.loads((out / "metadata.json").read_text())
    shard = out / meta["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    html = _report(out, tmp_path / "page.html")
    assert "could not be read while sampling" in html and shard.name in html
    assert "segprep verify" in html
    clean = _report(prepared[0], tmp_path / "clean.html")
    assert "could not be read while sampling" not in clean


def _group_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]


def _member_keys(dom: _Dom) -> list[str]:
    return [text for _, attrs, text in dom.find("div", class_="key") if text]


def test_the_largest_groups_are_shown_with_their_members(prepared, sample_dataset, tmp_path):
    """The sample's planted copies form the groups; each is drawn with its members."""
    out, _ = prepared
    groups = _group_lines(out)
    assert groups and len(groups) == len(sample_dataset.planted)
    page = tmp_path / "groups.html"
    _report(out, page)
    dom, shot, urls = _browse(page, tmp_path)
    figures = dom.find("figure", class_="group")
    assert len(figures) == len(groups)
    captions = [text for _, _, text in dom.find("figcaption") if "max distance" in text]
    for group in groups:
        caption = f"{len(group['keys'])} entries, {group['kind']}, max distance "
        caption += f"{group['max_distance']}, split {group['split']}"
        assert caption in captions
    tiles = [text for _, _, text in dom.find("div", class_="tile member")]
    for copy in sample_dataset.planted:
        assert any(text.startswith(copy.key) for text in tiles)
        assert any(text.startswith(copy.original) for text in tiles)
    assert len(dom.find("img", alt="group member")) == sum(len(g["keys"]) for g in groups)
    assert "No official splits were given" in dom.find(id="split-moves")[0][2]
    _assert_not_blank(shot)
    _only_local(urls)


def test_list_splits_missing_members_and_hostile_keys_in_groups(prepared, tmp_path):
    """Under official splits a group's split is a list; a member may be in no split; keys
    are text, never markup."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    stored = _group_lines(out)[0]["keys"][0]
    hostile = "<img src=x onerror=alert(1)>"
    line = {"keys": [stored, hostile], "split": ["train", "validation"], "kind": "near"}
    line |= {"max_distance": 4, "conflicting_masks": False}
    (out / "duplicates.jsonl").write_text(json.dumps(line) + "\n")
    page = tmp_path / "lists.html"
    text = _report(out, page)
    assert hostile not in text
    dom, _, urls = _browse(page, tmp_path)
    assert not dom.find("img", src="x")
    caption = dom.find("figure", class_="group")[0][2]
    assert "2 entries, near, max distance 4, splits train, validation" in caption
    tiles = [text for _, _, text in dom.find("div", class_="tile member")]
    assert tiles[0].startswith(stored) and tiles[1] == f"no image{hostile}in no split"
    assert "train, validation" in [text for _, _, text in dom.find("td")]
    _only_local(urls)


def test_the_group_section_stays_bounded(prepared, tmp_path):
    """Thousands of groups of dozens of members: a fixed number of groups and members."""
    import shutil

    from beam_pipeline.commands.report.gather import GALLERY_GROUPS, GALLERY_MEMBERS

    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    keys = [f"{index:05d}" for index in range(1, 61)]
    with (out / "duplicates.jsonl").open("w") as handle:
        for number in range(3000):
            members = keys[number % 20 : number % 20 + 5 + number % 30]
            row = {"keys": members, "split": "train", "kind": "near", "max_distance": 9}
            handle.write(json.dumps(row | {"conflicting_masks": False}) + "\n")
    text = _report(out, tmp_path / "big.html")
    assert text.count('<figure class="group"') == GALLERY_GROUPS
    assert text.count('alt="group member"') <= GALLERY_GROUPS * GALLERY_MEMBERS
    assert f'<figure class="group" data-size="{34}">' in text  # the largest come first
    assert len(text) < 3_000_000


def test_entries_kept_out_of_their_listed_split_are_listed(sample_dataset, tmp_path):
    """--split_file with a planted copy listed in validation and its original in train:
    the page lists exactly the group members stored outside their listed split (or says
    that there are none), as the records themselves show."""
    from shard_reader.source import RecordSource

    copy = sample_dataset.planted[0]
    keys = sorted(p.stem for p in sample_dataset.image_dir.glob("*.jpg"))
    listed = {key: "validation" if key == copy.key or key > "00040" else "train" for key in keys}
    listed[copy.original] = "train"
    for split in ("train", "validation"):
        names = [key for key, where in listed.items() if where == split]
        (tmp_path / f"{split}.txt").write_text("\n".join(names) + "\n")
    out = tmp_path / "out"
    argv = ["prepare", "--image_dir", str(sample_dataset.image_dir), "--mask_dir"]
    argv += [str(sample_dataset.mask_dir), "--output_dir", str(out), "--runner", "FnApiRunner"]
    for split in ("train", "validation"):
        argv += ["--split_file", f"{split}={tmp_path / f'{split}.txt'}"]
    assert main(argv) == 0
    stored = {}
    for split, info in json.loads((out / "metadata.json").read_text())["splits"].items():
        if info["num_examples"]:
            source = RecordSource(out, split)
            stored |= {source[index]["key"]: split for index in range(len(source))}
    grouped = {key for group in _group_lines(out) for key in group["keys"]}
    assert {copy.key, copy.original} <= grouped
    moved = sorted(k for k in grouped if k in stored and stored[k] != listed[k])
    page = tmp_path / "moves.html"
    _report(out, page)
    dom, _, _ = _browse(page, tmp_path)
    note = dom.find(id="split-moves")[0][2]
    rows = [text for _, _, text in dom.find("tr", class_="moved-entry")]
    assert rows == [f"{key}{listed[key]}{stored[key]}" for key in moved]
    if moved:
        assert f"moved out of {'its' if len(moved) == 1 else 'their'} listed split" in note
    else:
        assert "No entry was moved out of its listed split (--split_file" in note


def test_group_members_without_a_record_index_say_so(prepared, tmp_path):
    """An output whose record index is gone: the members are not claimed to be in no split."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    shutil.rmtree(out / "index")
    text = _report(out, tmp_path / "noindex.html")
    assert text.count("record not looked up") == sum(len(g["keys"]) for g in _group_lines(out))
    assert "in no split" not in text


def test_a_very_wide_image_gets_a_thumbnail_within_jpegs_limits(tmp_path):
    """A 3000x1 strip scaled to the thumbnails' height would be 336,000 pixels wide, past
    JPEG's 65,500: the report failed. It is scaled to fit the width instead."""
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    (data / "masks").mkdir()
    Image.new("RGB", (3000, 1), (200, 40, 40)).save(data / "images" / "strip.png")
    Image.new("L", (3000, 1), 255).save(data / "masks" / "strip.png")
    out = tmp_path / "out"
    argv = ["prepare", "--image_dir", str(data / "images"), "--mask_dir", str(data / "masks")]
    assert main([*argv, "--output_dir", str(out), "--runner", "FnApiRunner"]) == 0
    text = _report(out, tmp_path / "wide.html")
    assert "strip" in text and "data:image/jpeg;base64," in text


@pytest.mark.parametrize("inside", ["metadata.json", "index/page.html", "page.html"])
def test_the_page_is_never_written_inside_the_output(prepared, tmp_path, capsys, inside):
    """`--out OUT/metadata.json` replaced the dataset's commit marker with the page (verify
    then failed and --repair could not mend it): a place inside the output is refused."""
    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["report", str(out), "--out", str(out / inside)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "inside the output" in err, err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_long_output_name_gets_a_page_name_that_fits(prepared, tmp_path, capsys):
    """A legal output name of 250 bytes made `segprep-report-<name>.html` (and the page's
    temporary name beside an `--out` of 250 bytes) longer than a file name may be: "failed:
    OSError: File name too long". The name is cut, with a hash telling two such outputs apart."""
    data = tmp_path / "data"
    outs = [data / ("o" * 250), data / ("o" * 249 + "p")]
    pages = []
    for out in outs:
        shutil.copytree(prepared[0], out)
        assert main(["report", str(out)]) == 0, capsys.readouterr().err
        (line,) = capsys.readouterr().out.splitlines()
        pages.append(Path(line))
    assert pages[0] != pages[1]
    for page in pages:
        assert page.parent == data and page.is_file()
        assert page.name.startswith("segprep-report-ooo") and page.name.endswith(".html")
        assert len(page.name) <= 255 - len("_9999999")
    mine = tmp_path / ("p" * 250 + ".html")
    assert main(["report", str(outs[0]), "--out", str(mine)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines() == [str(mine)] and mine.is_file()


def test_a_tampered_duplicates_file_is_a_warning_and_a_fifo_one_line(prepared, tmp_path, capsys):
    """A group line of the wrong shape crashed the page (a Jinja TypeError, exit 1), a FIFO
    was an internal error, and an edited group was shown as fact: report checks the file
    as verify does (its sha256 against metadata.json, each line's shape)."""
    out = tmp_path / "out"
    shutil.copytree(prepared[0], out)
    clean = _report(out, tmp_path / "clean.html")
    assert 'id="duplicates-problems"' not in clean
    group = _group_lines(out)[0]
    wrong = {"keys": 5, "split": ["x"], "kind": None, "max_distance": "a", "conflicting_masks": {}}
    lines = [wrong, group, wrong]
    (out / "duplicates.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    page = tmp_path / "page.html"
    text = _report(out, page)
    dom = _Dom()
    dom.feed(text)
    warning = dom.find(id="duplicates-problems")[0][2]
    assert "duplicates.jsonl: size or sha256 differs from metadata.json" in warning
    assert "duplicates.jsonl: line 1: keys is not a list of two or more keys (and 1 more" in warning
    rows = [cells for cells in dom.find("td", class_="key")]
    assert [cells[2] for cells in rows] == [", ".join(group["keys"])]  # the shaped line only

    (out / "duplicates.jsonl").unlink()
    os.mkfifo(out / "duplicates.jsonl")
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(page)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "duplicates.jsonl: not a regular file" in err, err
