"""A commit cut short rolls forward or back, never strands the folder; the manifest and
segprep's own folders are untrusted input.

Real `segprep prepare` processes are stopped at each step of the commit journal by the
commit's test hook (runtime/commit_journal.py HOOK_VARIABLE): SIGKILL, SIGTERM, or a pause on
a FIFO while the test fills a real tmpfs. Afterwards the folder always verifies, holding the
earlier output or the new one, and the first run's last line says which.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from beam_pipeline.runtime.commit_journal import HOOK_VARIABLE
from tests.helpers.outputs import published, same_output
from tests.helpers.process_tree import start_cli
from tests.helpers.runs import job_args

OLD = ("--num_shards", "3")
NEW = ("--num_shards", "2")


def _prepare_args(dataset, out: Path, *extra: str) -> list[str]:
    return ["prepare", *job_args(dataset, out, *extra)]


@pytest.fixture(scope="module")
def references(sample_dataset, tmp_path_factory):
    """The earlier output (3 shards) and the new one (2 shards), each from a clean run."""
    root = tmp_path_factory.mktemp("references")
    for name, flags in (("old", OLD), ("new", NEW)):
        assert main(_prepare_args(sample_dataset, root / name, *flags)) == 0
    return root / "old", root / "new"


def _earlier_output(references, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(references[0], out)
    return out


def _killed_over_earlier(sample_dataset, references, tmp_path: Path, hook: str):
    """An --overwrite run over the earlier output killed at `hook`: the output folder, its
    commit journal and the run's staging folder."""
    out = _earlier_output(references, tmp_path)
    code, _ = _run(_prepare_args(sample_dataset, out, *NEW, "--overwrite"), {HOOK_VARIABLE: hook})
    assert code == -9
    journal = json.loads((out / ".segprep" / "manifest.json").read_text())
    return out, journal, out / ".segprep" / "runs" / journal["run_id"]


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    process = start_cli(args, env=env or {})
    _, err = process.communicate(timeout=600)
    return process.returncode, err.decode()


def _holds(out: Path, reference: Path) -> None:
    """`out` is `reference`'s output, verified, with no commit left unfinished."""
    same_output(out, reference)
    assert main(["verify", str(out)]) == 0
    manifest = json.loads((out / ".segprep" / "manifest.json").read_text())
    assert manifest["state"] == "committed"
    assert sorted(manifest["files"]) == sorted(published(out))


# --- the manifest and segprep's folders as untrusted input -------------------------------


@pytest.mark.parametrize("state", ["committed", "committing"])
@pytest.mark.parametrize("where", ["parent", "absolute"])
def test_a_crafted_manifest_deletes_nothing_outside(
    sample_dataset, references, tmp_path, capsys, state, where
):
    out = _earlier_output(references, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not segprep's")
    manifest_path = out / ".segprep" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"].append("../victim.txt" if where == "parent" else str(victim))
    manifest["state"] = state
    manifest_path.write_text(json.dumps(manifest))
    before = {name: (out / name).read_bytes() for name in published(out)}
    flags = ["--overwrite"] if state == "committed" else []
    assert main(_prepare_args(sample_dataset, out, *OLD, *flags)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "segprep never publishes" in err, err
    assert victim.read_text() == "not segprep's"
    assert {name: (out / name).read_bytes() for name in published(out)} == before


def test_a_crafted_journal_moves_nothing_outside(sample_dataset, references, tmp_path, capsys):
    out = _earlier_output(references, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not segprep's")
    manifest_path = out / ".segprep" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest.update(
        state="committing",
        run_id="x",
        previous=["../victim.txt"],
        kept=[],
        moves=[["rejects.jsonl", "rejects.jsonl"]],
        metadata_sha256="",
    )
    manifest_path.write_text(json.dumps(manifest))
    assert main(["verify", "--repair", str(out)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert victim.read_text() == "not segprep's"


@pytest.mark.parametrize("folder", [".segprep/runs", "index"])
def test_a_link_in_place_of_segpreps_folder_is_refused(
    sample_dataset, references, tmp_path, capsys, folder
):
    out = _earlier_output(references, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(out / folder, elsewhere)  # the earlier output has both folders
    shutil.rmtree(out / folder)
    (out / folder).symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    assert main(_prepare_args(sample_dataset, out, *NEW, "--overwrite")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not segprep's folder" in err, err
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


def test_a_link_in_place_of_the_lock_is_refused_in_one_line(
    sample_dataset, references, tmp_path, capsys
):
    out = _earlier_output(references, tmp_path)
    theirs = tmp_path / "theirs.json"
    theirs.write_text('{"precious": 1}')
    lock = out / ".segprep" / "lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(theirs)
    assert main(_prepare_args(sample_dataset, out, *NEW, "--overwrite")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "its lock .segprep/lock cannot be opened" in err
    assert theirs.read_text() == '{"precious": 1}'


def test_an_unjournaled_commit_is_refused_and_its_files_kept(
    sample_dataset, references, tmp_path, capsys
):
    """A manifest in state `committing` without a journal (an older segprep's, or edited):
    nothing proves its listed files are segprep's, so a run refuses in one line and deletes
    none of them, with or without --overwrite; moving them away lets it run."""
    out = tmp_path / "out"
    (out / ".segprep").mkdir(parents=True)
    listed = ["train-00000-of-00009.tfrecord", "index/train-00000-of-00009.tfrecord.idx"]
    (out / ".segprep" / "manifest.json").write_text(
        json.dumps({"state": "committing", "run_id": "crashed", "files": listed})
    )
    (out / "index").mkdir()
    for name in listed:
        (out / name).write_bytes(b"half published")
    for extra in ((), ("--overwrite",)):
        assert main(_prepare_args(sample_dataset, out, *NEW, *extra)) == 2
        assert "cannot tell they are its own" in capsys.readouterr().err
        assert all((out / name).read_bytes() == b"half published" for name in listed)
    shutil.rmtree(out)
    assert main(_prepare_args(sample_dataset, out, *NEW)) == 0
    _holds(out, references[1])


# --- the kill matrix ----------------------------------------------------------------------

# Each step of the journal, and which output the folder holds after a SIGKILL there and a
# recovery: before any new file is moved in, the earlier one; after, the new one.
STEPS = {
    "accounted": "old",
    "staged": "old",
    "journal": "old",
    "aside-1": "old",
    "aside": "old",
    "publish-1": "new",
    "publish": "new",
    "metadata": "new",
    "cleared": "new",
    "committed": "new",
}


@pytest.mark.parametrize("step", list(STEPS))
def test_sigkill_at_each_step_recovers_to_a_verified_output(
    sample_dataset, references, tmp_path, capsys, step
):
    out = _earlier_output(references, tmp_path)
    code, _ = _run(
        _prepare_args(sample_dataset, out, *NEW, "--overwrite"), {HOOK_VARIABLE: f"{step}:kill"}
    )
    assert code == -9
    expected = references[0] if STEPS[step] == "old" else references[1]
    if list(STEPS).index(step) % 2:  # recovered by verify --repair, or by the next run
        assert main(["verify", "--repair", str(out)]) == 0
        assert not list((out / ".segprep" / "runs").iterdir())  # ended runs' staging
    else:
        assert main(_prepare_args(sample_dataset, out, *NEW)) == 2  # a finished output now
        err = capsys.readouterr().err
        if list(STEPS).index(step) >= list(STEPS).index("journal"):
            restored = "rolled back" if STEPS[step] == "old" else "was completed"
            assert restored in err, err
        assert "already holds a finished segprep output" in err, err
    _holds(out, expected)


def test_a_move_cut_between_its_copy_and_its_delete_still_rolls_forward(
    sample_dataset, references, tmp_path
):
    """On gs:// a move is a copy, then a delete: killed between the two, a run's new file is
    both staged and at its final name. Recovery must roll forward over it (its size is the
    one the new metadata.json lists), not refuse it as a file the run did not write."""
    out, journal, staged = _killed_over_earlier(
        sample_dataset, references, tmp_path, "publish-1:kill"
    )
    earlier = set(journal["previous"]) | set(journal["kept"])
    waiting = [
        (name, final)
        for name, final in journal["moves"]
        if (staged / name).exists() and final not in earlier and not (out / final).exists()
    ]
    assert waiting, "no move of a new name left to cut"
    name, final = waiting[0]
    shutil.copyfile(staged / name, out / final)  # copied, not yet deleted
    assert main(["verify", "--repair", str(out)]) == 0
    _holds(out, references[1])


def test_a_move_cut_between_its_copy_and_its_delete_rolls_back_to_the_earlier_output(
    sample_dataset, references, tmp_path
):
    """Cut after every earlier file went aside and one new file was copied to a name the
    earlier output also uses (not yet deleted from staging): recovery rolls back, and the
    earlier file must come back to that name. The rollback once kept the new copy there and
    removed the run folder holding the only copy of the earlier file."""
    out, journal, staged = _killed_over_earlier(sample_dataset, references, tmp_path, "aside:kill")
    shared = [
        (name, final)
        for name, final in journal["moves"]
        if final in journal["previous"]
        and final != "metadata.json"
        and (staged / name).exists()
        and (staged / name).read_bytes() != (staged / "previous" / final).read_bytes()
    ]
    assert shared, "no new file shares a name with an earlier one"
    name, final = shared[0]
    shutil.copyfile(staged / name, out / final)  # copied, not yet deleted
    assert main(["verify", "--repair", str(out)]) == 0
    _holds(out, references[0])


def test_a_users_file_at_a_name_whose_earlier_file_went_aside_is_not_written_over(
    sample_dataset, references, tmp_path, capsys
):
    """Killed while publishing: the earlier files are aside, so a file now at a name both
    outputs use is not the earlier one. A user's file put there is not the run's either
    (not the size the new metadata.json lists): recovery refuses and keeps it."""
    out, journal, staged = _killed_over_earlier(
        sample_dataset, references, tmp_path, "publish-1:kill"
    )
    shared = [
        final
        for name, final in journal["moves"]
        if final in journal["previous"] and (staged / name).exists() and not (out / final).exists()
    ]
    assert shared, "no shared name left to publish"
    theirs = out / shared[0]
    theirs.write_bytes(b"MY OWN FILE")
    assert main(["verify", "--repair", str(out)]) == 2
    assert "does not list as its own" in capsys.readouterr().err
    assert theirs.read_bytes() == b"MY OWN FILE"


def test_a_cut_copy_of_a_file_with_the_earlier_files_bytes_still_rolls_forward(
    sample_dataset, references, tmp_path
):
    """A gs:// move cut between copy and delete, for a new file whose bytes are the earlier
    file's (features.json; any file of a rerun on the same inputs): the earlier file is
    aside, so the one at the final name is not the published one, and recovery must roll
    forward rather than refuse it as "the published file"."""
    out, journal, staged = _killed_over_earlier(
        sample_dataset, references, tmp_path, "publish:kill"
    )
    same = [
        (name, final)
        for name, final in journal["moves"]
        if (out / final).exists()
        and (staged / "previous" / final).exists()
        and (out / final).read_bytes() == (staged / "previous" / final).read_bytes()
    ]
    assert same, "no new file with the earlier file's bytes"
    name, final = same[0]
    shutil.copyfile(out / final, staged / name)  # the copy made, its delete not yet
    assert main(["verify", "--repair", str(out)]) == 0
    _holds(out, references[1])


# After a SIGTERM the run itself rolls back, unless its metadata.json was already in place.
TERM_OUTCOMES = {
    "accounted": ("old", "nothing was published; the earlier output is in place"),
    "journal": ("old", "nothing was published; the earlier output is in place"),
    "aside-1": ("old", "nothing was published; the earlier output is in place"),
    "publish-1": ("old", "nothing was published; the earlier output is in place"),
    "publish": ("old", "nothing was published; the earlier output is in place"),
    "metadata": ("new", "the new output is published"),
    "committed": ("new", "the new output is published"),
}


@pytest.mark.parametrize("step", list(TERM_OUTCOMES))
def test_sigterm_at_each_step_rolls_back_or_says_it_published(
    sample_dataset, references, tmp_path, step
):
    out = _earlier_output(references, tmp_path)
    code, err = _run(
        _prepare_args(sample_dataset, out, *NEW, "--overwrite"), {HOOK_VARIABLE: f"{step}:term"}
    )
    which, said = TERM_OUTCOMES[step]
    assert code == 143
    assert err.strip().splitlines() == [f"segprep: terminated: {said}"] or (
        which == "new" and said in err.strip().splitlines()[-1]
    ), err
    _holds(out, references[0] if which == "old" else references[1])


def _hung_up_at(args: list[str], step: str, fifo: Path) -> tuple[int, str]:
    """Run segprep until its commit waits at `step`, then hang up on it (SIGHUP)."""
    os.mkfifo(fifo)
    process = start_cli(args, env={HOOK_VARIABLE: f"{step}:{fifo}"})
    with open(fifo, "wb"):  # opens once the commit waits at `step`
        os.kill(process.pid, signal.SIGHUP)
        _, err = process.communicate(timeout=600)
    return process.returncode, err.decode()


def test_a_hang_up_inside_the_commit_rolls_back_like_sigterm(sample_dataset, references, tmp_path):
    """SIGHUP (a closed terminal) inside the commit was a SIGKILL: the journal left for the
    next run. It rolls back at once, as SIGTERM does, and says so in one line."""
    out = _earlier_output(references, tmp_path)
    args = _prepare_args(sample_dataset, out, *NEW, "--overwrite")
    code, err = _hung_up_at(args, "publish-1", tmp_path / "fifo")
    assert code == 129, err
    assert err.strip().splitlines() == [
        "segprep: hung up: nothing was published; the earlier output is in place"
    ]
    _holds(out, references[0])
    assert not (out / ".segprep" / "lock").exists()


def test_a_hang_up_inside_segprep_index_rolls_back(references, tmp_path):
    """`segprep index` holds the lock and publishes like a run: a hang-up there too ends in
    one line with the output as it was."""
    out = _earlier_output(references, tmp_path)
    code, err = _hung_up_at(["index", str(out)], "journal", tmp_path / "fifo")
    assert code == 129, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("segprep: hung up: "), err
    _holds(out, references[0])
    assert not (out / ".segprep" / "lock").exists()


# --- a full disk --------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 MB tmpfs, unmounted afterwards; skipped where mounting is not permitted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Take all the free space of `disk` but `leave` bytes."""
    filler = disk / "filler"
    info = os.statvfs(disk)
    size = max(info.f_bavail * info.f_frsize - leave, 0)
    with open(filler, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, size)
    return filler


def _paused_run(args: list[str], step: str, fifo: Path, while_paused) -> tuple[int, str]:
    """Run segprep until the commit reaches `step`, call `while_paused`, let it go on."""
    os.mkfifo(fifo)
    process = start_cli(args, env={HOOK_VARIABLE: f"{step}:{fifo}"})
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)
    reader.start()
    with open(fifo, "wb"):  # opens once the commit waits at `step`
        while_paused()
    process.wait(timeout=600)
    reader.join(60)
    return process.returncode, b"".join(errors).decode()


def test_a_commit_that_cannot_fit_is_refused_before_anything_moves(
    sample_dataset, references, small_disk, tmp_path
):
    out = small_disk / "out"
    shutil.copytree(references[0], out)
    args = _prepare_args(sample_dataset, out, *NEW, "--overwrite")
    code, err = _paused_run(args, "accounted", tmp_path / "fifo", lambda: _fill(small_disk, 0))
    assert code == 1
    assert "not enough space" in err and "nothing was published" in err, err
    assert len(err.strip().splitlines()) == 1, err
    (small_disk / "filler").unlink()
    _holds(out, references[0])


@pytest.mark.parametrize("step", ["journal", "aside"])
def test_a_disk_that_fills_inside_the_commit_still_publishes(
    sample_dataset, references, small_disk, tmp_path, step
):
    """Every step after the journal is a rename, and the earlier output is removed before
    the manifest is rewritten: a full disk there cannot stop the commit."""
    out = small_disk / "out"
    shutil.copytree(references[0], out)
    args = _prepare_args(sample_dataset, out, *NEW, "--overwrite")
    code, err = _paused_run(args, step, tmp_path / "fifo", lambda: _fill(small_disk, 0))
    assert code == 0, err
    (small_disk / "filler").unlink()
    _holds(out, references[1])


def test_a_full_disk_at_the_last_manifest_write_loses_nothing(
    sample_dataset, references, small_disk, tmp_path, capsys
):
    """The new metadata.json is in place and the earlier output gone: a manifest that cannot
    be written leaves the new output, says so, and `verify --repair` finishes it."""
    out = small_disk / "out"
    shutil.copytree(references[0], out)
    args = _prepare_args(sample_dataset, out, *NEW, "--overwrite")
    code, err = _paused_run(args, "cleared", tmp_path / "fifo", lambda: _fill(small_disk, 0))
    assert code == 1
    assert "No space left on device" in err and "the new output is published" in err, err
    assert main(["verify", str(out)]) == 1  # the commit is not finished
    assert "verify --repair" in capsys.readouterr().out
    (small_disk / "filler").unlink()
    assert main(["verify", "--repair", str(out)]) == 0
    _holds(out, references[1])


# --- forged journals whose names are all valid ----------------------------------------------


def _forge_journal(out: Path, how: str) -> None:
    """A `committing` journal naming only published names, each aimed at the dataset."""
    import hashlib

    names = sorted(published(out) - {"metadata.json"})
    shards = [name for name in names if name.endswith(".tfrecord")]
    journal = {"state": "committing", "run_id": "x", "previous_run_id": "", "kept": []}
    journal.update(previous=[], moves=[[name, name] for name in names], metadata_sha256="0" * 64)
    staged = out / ".segprep" / "runs" / "x"
    if how != "zero_sha":
        staged.mkdir(parents=True)
        forged = json.loads((out / "metadata.json").read_text())
        forged["forged"] = True
        data = json.dumps(forged).encode()
        (staged / "metadata.json").write_bytes(data)
        journal["metadata_sha256"] = hashlib.sha256(data).hexdigest()
    if how == "duplicate_targets":
        journal["moves"] = [[shards[0], shards[0]], [shards[1], shards[0]]]
    elif how == "aside_copy_swapped":
        (staged / "previous").mkdir()
        (staged / "previous" / shards[0]).write_bytes(b"not the published shard")
        journal.update(previous=[shards[0]], moves=[[shards[0], shards[0]]])
    journal["files"] = sorted({*journal["previous"], *(final for _, final in journal["moves"])})
    (out / ".segprep" / "manifest.json").write_text(json.dumps(journal))


@pytest.mark.parametrize(
    "how", ["zero_sha", "staged_metadata_forged", "duplicate_targets", "aside_copy_swapped"]
)
def test_a_forged_journal_moves_and_deletes_no_published_file(references, tmp_path, capsys, how):
    """Issue #31: every published shard "moved" to itself with an all-zero metadata_sha256
    had `verify --repair` move the whole dataset into staging and delete it."""
    out = _earlier_output(references, tmp_path)
    _forge_journal(out, how)
    before = {name: (out / name).read_bytes() for name in published(out)}
    assert main(["verify", "--repair", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing was changed" in err, err
    assert {name: (out / name).read_bytes() for name in published(out)} == before
    assert before.keys() == published(out)


@pytest.mark.parametrize("staged_metadata", ["a_copy_of_the_published_one", "not_a_metadata"])
def test_a_forged_journal_never_moves_a_file_no_metadata_lists(
    references, tmp_path, capsys, staged_metadata
):
    """A user's file under a shard-like name that no metadata.json lists, named by a forged
    `committing` journal as its run's new file: rolled back, it went into the run folder and
    was removed with it."""
    import hashlib

    out = _earlier_output(references, tmp_path)
    theirs = out / "validation-00003-of-00004.tfrecord"
    theirs.write_bytes(b"the user's own file")
    staged = out / ".segprep" / "runs" / "r1"
    staged.mkdir(parents=True)
    if staged_metadata == "not_a_metadata":
        data = b'{"forged": true}'
    else:
        forged = json.loads((out / "metadata.json").read_text())
        forged["forged"] = True
        data = json.dumps(forged).encode()
    (staged / "metadata.json").write_bytes(data)
    kept = sorted(published(out) - {"metadata.json", theirs.name})
    journal = {
        "state": "committing",
        "run_id": "r1",
        "previous_run_id": "",
        "previous": [],
        "kept": kept,
        "moves": [
            [theirs.name, theirs.name],
            ["train-00098-of-00099.tfrecord", "train-00098-of-00099.tfrecord"],
        ],
        "metadata_sha256": hashlib.sha256(data).hexdigest(),
    }
    journal["files"] = sorted({*kept, theirs.name, "train-00098-of-00099.tfrecord"})
    (out / ".segprep" / "manifest.json").write_text(json.dumps(journal))
    before = {name: (out / name).read_bytes() for name in published(out)}
    assert main(["verify", "--repair", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing was changed" in err, err
    assert theirs.read_bytes() == b"the user's own file"
    assert {name: (out / name).read_bytes() for name in published(out)} == before


@pytest.mark.parametrize("path", ["forward", "back"])
def test_a_run_folder_linked_elsewhere_is_refused_and_nothing_there_moves(
    references, tmp_path, capsys, path
):
    """A forged journal whose run folder (.segprep/runs/<run_id>) is a link to a folder of
    the user's: rolling forward deleted its previous/ tree, rolling back moved its files into
    the output. Every part of a path the journal moves or deletes must be segprep's folder."""
    import hashlib

    out = _earlier_output(references, tmp_path)
    victim = tmp_path / "victim"
    (victim / "previous").mkdir(parents=True)
    shard = sorted(name for name in published(out) if name.endswith(".tfrecord"))[0]
    (victim / "previous" / shard).write_bytes(b"the user's file")
    journal = {"state": "committing", "run_id": "linked", "previous_run_id": "", "kept": []}
    if path == "forward":  # the metadata in place is the "new" one: the aside tree goes
        metadata = (out / "metadata.json").read_bytes()
        journal.update(files=[], previous=[], moves=[])
    else:  # a shard missing, its "aside" copy in the linked folder: it would be moved back
        metadata = b'{"staged": "metadata"}'
        (victim / "metadata.json").write_bytes(metadata)
        (out / shard).unlink()
        journal.update(files=[shard], previous=[shard], moves=[])
    journal["metadata_sha256"] = hashlib.sha256(metadata).hexdigest()
    (out / ".segprep" / "runs").mkdir(parents=True, exist_ok=True)
    (out / ".segprep" / "runs" / "linked").symlink_to(victim)
    (out / ".segprep" / "manifest.json").write_text(json.dumps(journal))
    before = sorted(str(p.relative_to(victim)) for p in victim.rglob("*"))
    assert main(["verify", "--repair", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not segprep's folder" in err, err
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == before
    assert (victim / "previous" / shard).read_bytes() == b"the user's file"
