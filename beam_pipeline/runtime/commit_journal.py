"""The commit as a journal that always rolls forward or back, never strands the folder.

`.segprep/manifest.json` is the journal. Before anything moves it is written in state
`committing` with everything recovery needs: the earlier output's files (`previous`), each
(staged name, final name) move, and the sha256 of the new metadata.json, which is staged
beside the shards. Then, in this order:

1. the earlier output's files are moved aside into `.segprep/runs/<run>/previous/`;
2. the staged files are renamed to their final names, the staged metadata.json last;
3. once the new metadata.json is in place, the aside folder is removed and the manifest is
   rewritten in state `committed` listing the new names alone.

Every step is a rename, so the place of each file says how far a commit got. `recover` reads
the journal and finishes the job: with the new metadata.json in place it rolls forward; a
commit cut short while its new files were being moved in (every one still at hand) rolls
forward too; anything earlier rolls back, moving the new files back to staging and the
earlier output back to its names. A run that fails in the commit (a signal, a full disk)
rolls back at once unless its metadata.json is already in place: a failed run publishes
nothing. Recovery is idempotent: cut short itself, it is simply run again.

The manifest is untrusted input: every name in it must be one segprep publishes
(`is_published_name`), the run id a plain name, or it is refused in one line and nothing
is touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import signal
from collections.abc import Iterable

from beam_pipeline.runtime import interrupts
from beam_pipeline.runtime.refusal import Refusal
from transforms import files, json_shape
from transforms.format.dataset_info import DatasetInfo, MetadataError, parse_json
from transforms.format.naming import (
    COMMITTED,
    COMMITTING,
    INDEX_DIR,
    INDEX_SUFFIX,
    MANIFEST_FILE,
    METADATA_FILE,
    REJECTS_FILE,
    SEGPREP_DIR,
    SIDE_TABLE_RE,
    UNLABELED_FILE,
    is_output_name,
    parse_shard_name,
    run_dir,
)
from transforms.format.side_tables import listed_refs
from transforms.limits import FILE_LIMITS

PREVIOUS_DIR = "previous"  # inside the run's staging folder: the earlier output, moved aside
# Beyond the bytes a commit writes: the manifest's temporary copy, directory blocks and the
# file system's own reserve.
SPACE_MARGIN = 1 << 20
# Test hook, documented in docs/architecture.md: "STEP:kill", "STEP:term" or "STEP:FIFO"
# stops the commit at STEP (SIGKILL, SIGTERM, or a blocking read of the FIFO until its
# writer closes it), so tests can cut a commit short at an exact step of the journal.
HOOK_VARIABLE = "SEGPREP_TEST_COMMIT_HOOK"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_KEY_TABLE = SIDE_TABLE_RE


class CommitSpaceError(RuntimeError):
    """The output's file system cannot hold what the commit writes: refused before it starts."""

    _tagged_with_step = True  # Beam keeps the message as it is: a whole line for the user


def is_published_name(name: object) -> bool:
    """A name segprep may publish in an output folder: the same rule for metadata.json's
    files and for the manifest (no '..', no absolute path, nothing else)."""
    if not isinstance(name, str):
        return False
    parts = name.split("/")
    if len(parts) == 1:
        return name != INDEX_DIR and is_output_name(name)
    if len(parts) != 2 or parts[0] != INDEX_DIR:
        return False
    inner = parts[1]
    if inner.endswith(INDEX_SUFFIX):
        return parse_shard_name(inner[: -len(INDEX_SUFFIX)]) is not None
    return _KEY_TABLE.fullmatch(inner) is not None


@dataclasses.dataclass(frozen=True)
class Journal:
    """A manifest in state `committing`, checked."""

    run_id: str
    previous_run_id: str
    previous: tuple[str, ...]  # the earlier output's files, moved aside in this order
    kept: tuple[str, ...]  # earlier files that stay where they are (`segprep index`)
    moves: tuple[tuple[str, str], ...]  # (staged name, final name)
    metadata_sha256: str

    @property
    def final(self) -> list[str]:
        return sorted({name for _, name in self.moves} | set(self.kept) | {METADATA_FILE})

    def to_json(self) -> dict:
        return {
            "state": COMMITTING,
            "run_id": self.run_id,
            "files": sorted({*self.previous, *self.kept, *self.final}),
            "previous_run_id": self.previous_run_id,
            "previous": list(self.previous),
            "kept": list(self.kept),
            "moves": [list(move) for move in self.moves],
            "metadata_sha256": self.metadata_sha256,
        }


def read_manifest(output_dir: str) -> dict | None:
    """The manifest, checked: None when there is none (or it is not JSON: a manifest segprep
    wrote is replaced whole, never half); UsageError when it names what segprep never writes."""
    try:
        path = files.join(output_dir, MANIFEST_FILE)
        body = json_shape.loads(files.read_bounded(path, FILE_LIMITS.metadata_bytes), path)
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("files"), list):
        return None
    names = list(body["files"])
    if "moves" in body:
        for key in ("moves", "previous", "kept"):
            if not isinstance(body.get(key), list):
                _refuse(output_dir, f"has no valid {key!r} list")
        for move in body["moves"]:
            if not (isinstance(move, list) and len(move) == 2):
                _refuse(output_dir, "has a move that is not a (staged, final) pair")
            names += move
        names += body["previous"] + body["kept"]
    for name in names:
        if not is_published_name(name):
            _refuse(output_dir, f"lists {str(name)[:80]!r}, a name segprep never publishes")
    for key in ("run_id", "previous_run_id"):
        value = body.get(key) or ""
        if value and not (isinstance(value, str) and _RUN_ID.fullmatch(value)):
            _refuse(output_dir, f"has the {key} {str(value)[:80]!r}, not a run id")
    return body


def _refuse(output_dir: str, what: str) -> None:
    raise Refusal(
        f"{files.join(output_dir, MANIFEST_FILE)} {what}: it is damaged or not segprep's; "
        f"nothing was changed (move {SEGPREP_DIR} away to start afresh)"
    )


def journal_of(manifest: dict | None) -> Journal | None:
    """The journal of a commit that did not finish, None for any other manifest."""
    if not manifest or manifest.get("state") != COMMITTING or "moves" not in manifest:
        return None
    if not manifest.get("run_id"):
        raise Refusal(f"{MANIFEST_FILE}: a commit journal without a run id: move it away")
    return Journal(
        manifest["run_id"],
        manifest.get("previous_run_id") or "",
        tuple(manifest["previous"]),
        tuple(manifest["kept"]),
        tuple((staged, final) for staged, final in manifest["moves"]),
        str(manifest.get("metadata_sha256") or ""),
    )


def write_manifest(output_dir: str, body: dict) -> None:
    """Whole or not at all, through the file layer (a temporary name and a rename locally)."""
    own_folder(output_dir, SEGPREP_DIR)  # a real folder of segprep's, never a link
    files.write_bytes(files.join(output_dir, MANIFEST_FILE), json.dumps(body, indent=1).encode())


def committed_manifest(run_id: str, files: Iterable[str]) -> dict:
    return {"state": COMMITTED, "run_id": run_id, "files": sorted(set(files))}


# --- folders segprep owns ---------------------------------------------------------------


def own_folder(output_dir: str, relative: str, *, create: bool = True) -> None:
    """Make sure every folder of `relative` under a local output is a real folder of
    segprep's: created if absent, and a link (or a file) there is refused, never followed."""
    if not files.is_local(output_dir):
        return
    path = output_dir.rstrip("/") or "/"
    for part in relative.strip("/").split("/"):
        path = os.path.join(path, part)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
            info = os.lstat(path)
        if not _is_real_folder(info):
            raise Refusal(
                f"{{output_dir}} {output_dir}: {os.path.relpath(path, output_dir)} is not "
                "segprep's folder (a link or a file): move it away"
            )


def _is_real_folder(info: os.stat_result) -> bool:
    import stat

    return stat.S_ISDIR(info.st_mode)


def remove_empty_index(output_dir: str) -> None:
    """Cleaning leaves no empty folder of segprep's behind: index/ goes once it is empty."""
    if files.is_local(output_dir):
        path = os.path.join(output_dir, INDEX_DIR)
        with contextlib.suppress(OSError):  # absent, not empty, or a link (refused elsewhere)
            if _is_real_folder(os.lstat(path)):
                os.rmdir(path)


# --- space --------------------------------------------------------------------------------


def check_space(output_dir: str, needed: int) -> None:
    """Refuse a commit whose writes (staged tables, metadata, manifest) cannot fit, before
    anything moves. Renames within the file system need no space. gs:// is not checked."""
    if not files.is_local(output_dir):
        return
    info = os.statvfs(output_dir)
    free = info.f_bavail * info.f_frsize
    if needed + SPACE_MARGIN > free:
        raise CommitSpaceError(
            f"not enough space in {output_dir} to commit: about {_mb(needed + SPACE_MARGIN)} "
            f"needed, {_mb(free)} free; nothing was published and nothing of an earlier "
            "output was changed"
        )


def _mb(size: int) -> str:
    return f"{size / (1 << 20):.1f} MB"


def manifest_bytes(names: Iterable[str]) -> int:
    """A bound on the journal's size for these names (each written twice at most)."""
    return sum(2 * len(name) + 16 for name in names) + 4096


# --- the commit ---------------------------------------------------------------------------


def run(output_dir: str, journal: Journal, metadata: bytes) -> None:
    """Stage metadata.json, write the journal, then steps 1-3. Cut short once the journal
    is written, the commit rolls back (or forward, once the new metadata.json is in place)
    before the failure propagates."""
    files.write_bytes(files.join(output_dir, _staged_name(journal.run_id, METADATA_FILE)), metadata)
    hook("staged")
    if interrupts.taken() is not None:  # a Ctrl-C that a finalizer swallowed (interrupts.py)
        raise KeyboardInterrupt
    try:
        write_manifest(output_dir, journal.to_json())
        hook("journal")
        for number, name in enumerate(journal.previous, 1):
            _move(output_dir, name, _aside(journal.run_id, name))
            hook(f"aside-{number}")
        hook("aside")
        for number, (staged, final) in enumerate(journal.moves, 1):
            _move(output_dir, _staged_name(journal.run_id, staged), final)
            hook(f"publish-{number}")
        hook("publish")
        _move(output_dir, _staged_name(journal.run_id, METADATA_FILE), METADATA_FILE)
        hook("metadata")
        _finish_forward(output_dir, journal)
    except BaseException:
        # A second Ctrl-C, SIGTERM or SIGHUP waits until the roll-back is done.
        with interrupts.blocked({signal.SIGINT, signal.SIGTERM, signal.SIGHUP}):
            # With the storage gone a rollback would only retry for minutes: the journal
            # stays for `verify --repair` (or the next run) once it answers again.
            if not files.storage_gone(output_dir) and _journal_on_disk(output_dir) == journal:
                recover(output_dir, journal, prefer_back=True)
        raise


def _journal_on_disk(output_dir: str) -> Journal | None:
    try:
        return journal_of(read_manifest(output_dir))
    except Refusal:
        return None


def recover(output_dir: str, journal: Journal, *, prefer_back: bool = False) -> str:
    """Finish a commit cut short: forward or back by how far it got; what was done. A journal
    whose moves recovery cannot prove are its own run's is refused first (`_witnessed`)."""
    where = _Where(output_dir, journal)
    forward = where.metadata_in_place() or (
        not prefer_back and where.publishing_began() and where.all_at_hand()
    )
    _witnessed(output_dir, journal, where, forward)
    if forward:
        _forward(output_dir, journal, where)
        return (
            f"the interrupted commit of run {journal.run_id} was completed: its output is published"
        )
    _back(output_dir, journal, where)
    if journal.previous or journal.kept:
        restored = f"the earlier output (run {journal.previous_run_id or '?'}) is restored"
    else:
        restored = "there was no earlier output"
    return f"the interrupted commit of run {journal.run_id} was rolled back: {restored}"


def _witnessed(output_dir: str, journal: Journal, where: _Where, forward: bool) -> None:
    """Refuse, changing nothing, a journal that would let recovery move, replace or delete a
    published file it cannot prove its own run replaced.

    A real journal moves each final name once, never one it keeps or metadata.json (moved
    last, apart); its new metadata.json (the sha256 it lists) is staged or in place until the
    commit ends, and the earlier one was moved aside before anything was published. The
    earlier metadata.json (aside, or in place while the new one is not) is the witness of
    the published files: a file whose bytes are those it lists for its name is the published
    file, so recovery never moves it into staging or writes over it."""
    finals = [final for _, final in journal.moves]
    staged = [name for name, _ in journal.moves]
    if len(set(finals)) != len(finals) or len(set(staged)) != len(staged):
        _refuse(output_dir, "moves two files to one name (or one file twice)")
    if METADATA_FILE in (*finals, *staged, *journal.kept):
        _refuse(output_dir, "moves metadata.json as one of its files")
    if set(finals) & set(journal.kept) or set(journal.previous) & set(journal.kept):
        _refuse(output_dir, "both keeps and replaces a file")
    if len(set(journal.previous)) != len(journal.previous):
        _refuse(output_dir, "moves an earlier file aside twice")
    in_place = where.metadata_in_place()
    if not (in_place or where.staged_metadata_matches()):
        _refuse(
            output_dir,
            "lists a metadata_sha256 that matches no metadata.json, staged or in place: it "
            "cannot tell its run's files from the published ones",
        )
    if forward and not in_place and where.exists(METADATA_FILE):
        _refuse(output_dir, "would write its metadata.json over the published one")
    published = where.earlier_listing()
    earlier = set(journal.previous)
    for name, final in journal.moves:
        entry = published.get(final)
        if entry is None or not where.exists(final):
            continue
        if forward:  # the staged file would be renamed over it, unless the earlier is aside
            touched = where.staged(name) and not where.aside(final)
        elif final in earlier:  # moved to staging, the aside copy put back in its place
            aside = _aside(journal.run_id, final)
            touched = not where.staged(name) and where.aside(final)
            touched = touched and not where.holds(aside, entry)
        else:  # moved to staging, then removed with it
            touched = not where.staged(name)
        if touched and where.holds(final, entry):
            _refuse(output_dir, f"would move or replace the published {final} as its run's own")
    _foreign_finals(output_dir, journal, where, forward, set(published) | earlier)


def _foreign_finals(
    output_dir: str, journal: Journal, where: _Where, forward: bool, accounted: set[str]
) -> None:
    """Refuse a journal that would write over, or move into its run folder (which recovery
    then removes), a file at one of its final names that no earlier output listed or set
    aside: a file segprep cannot tie to the run (a user's, under a shard-like name). It is
    tied when it has the size the run's new metadata.json lists for it (sizes, not sha256:
    a rollback must not read every published shard with signals held), or, with no earlier
    output at all, when it is one of the run's fixed-name lists. Rolling forward over such a
    file happens on gs://, where a move is a copy then a delete: the copy is the run's.
    An earlier output's name counts as accounted for only while its earlier file has not
    been set aside: once it has, a file at that name is the run's, the earlier file itself
    (a gs:// move aside cut short; its exact bytes), or someone else's."""
    new_listing: dict[str, tuple[int, str]] | None = None
    earlier_listing = where.earlier_listing()
    first_run = not earlier_listing and not journal.previous and not journal.kept
    for name, final in journal.moves:
        if not where.exists(final):
            continue
        if forward != where.staged(name):
            continue  # left where it is: forward moves only staged files, back only moved ones
        if not forward and first_run and final in (REJECTS_FILE, UNLABELED_FILE):
            continue
        if new_listing is None:
            new_listing = where.new_listing()
        entry = new_listing.get(final)
        if final in accounted and (entry is None or not where.aside(final)):
            continue  # the earlier output's file in its place, or a fixed name no size lists
        if entry is None or not where.sized(final, entry):
            earlier = earlier_listing.get(final)
            if earlier is not None and where.holds(final, earlier):
                continue
            doing = "write its run's file over" if forward else "move into its run's folder"
            _refuse(
                output_dir,
                f"would {doing} {final}, which its new metadata.json does not list as its own",
            )


def metadata_in_place(output_dir: str, journal: Journal) -> bool:
    """The journal's new metadata.json is at its final name: the commit is past return."""
    return _Where(output_dir, journal).metadata_in_place()


class _Where:
    """Where each file of a journal is now."""

    def __init__(self, output_dir: str, journal: Journal) -> None:
        self.out = output_dir
        self.journal = journal

    def exists(self, name: str) -> bool:
        path = files.join(self.out, name)
        if files.is_local(self.out):
            return os.path.lexists(path)
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.exists(path)

    def staged(self, name: str) -> bool:
        return self.exists(_staged_name(self.journal.run_id, name))

    def aside(self, name: str) -> bool:
        return self.exists(_aside(self.journal.run_id, name))

    def _metadata(self, name: str) -> bytes | None:
        try:
            return files.read_bounded(files.join(self.out, name), FILE_LIMITS.metadata_bytes)
        except OSError:
            return None

    def _is_new_metadata(self, data: bytes | None) -> bool:
        return data is not None and hashlib.sha256(data).hexdigest() == self.journal.metadata_sha256

    def metadata_in_place(self) -> bool:
        return self._is_new_metadata(self._metadata(METADATA_FILE))

    def staged_metadata_matches(self) -> bool:
        return self._is_new_metadata(
            self._metadata(_staged_name(self.journal.run_id, METADATA_FILE))
        )

    def earlier_listing(self) -> dict[str, tuple[int, str]]:
        """{name: (bytes, sha256)} of every file the earlier metadata.json lists: the one
        aside, else the one in place when it is not the new one; {} when there is none.
        An earlier metadata.json that cannot be read is refused: no witness, no recovery."""
        data = self._metadata(_aside(self.journal.run_id, METADATA_FILE))
        if data is None:
            data = self._metadata(METADATA_FILE)
            if data is None or self._is_new_metadata(data):
                return {}
        return self._listing(data, "the earlier metadata.json")

    def new_listing(self) -> dict[str, tuple[int, str]]:
        """{name: (bytes, sha256)} of every file the run's new metadata.json (staged, or in
        place) lists; one that cannot be read or checked is refused."""
        data = self._metadata(_staged_name(self.journal.run_id, METADATA_FILE))
        if not self._is_new_metadata(data):
            data = self._metadata(METADATA_FILE)
        return self._listing(data or b"", "its new metadata.json")

    def _listing(self, data: bytes, which: str) -> dict[str, tuple[int, str]]:
        try:
            info = DatasetInfo.from_json(parse_json(data))
        except (MetadataError, ValueError) as error:
            _refuse(self.out, f"cannot be checked against {which} ({error})")
        return listed_refs(info)

    def sized(self, name: str, entry: tuple[int, str]) -> bool:
        """The file at `name` has the listed size."""
        try:
            return files.stat(files.join(self.out, name)).size == entry[0]
        except OSError:
            return False

    def holds(self, name: str, entry: tuple[int, str]) -> bool:
        """The file at `name` has exactly the listed size and sha256 (the size first)."""
        if not self.sized(name, entry):
            return False
        try:
            return files.sha256(files.join(self.out, name)) == entry[1]
        except OSError:
            return False

    def publishing_began(self) -> bool:
        """Every earlier file is aside and at least one new file has left staging."""
        return all(self.aside(name) for name in self.journal.previous) and any(
            not self.staged(staged) for staged, _ in self.journal.moves
        )

    def all_at_hand(self) -> bool:
        """Every new file is either still staged or at its final name: forward can finish."""
        return self.staged(METADATA_FILE) and all(
            self.staged(staged) or self.exists(final) for staged, final in self.journal.moves
        )


def _forward(output_dir: str, journal: Journal, where: _Where) -> None:
    for staged, final in journal.moves:
        if where.staged(staged):
            _move(output_dir, _staged_name(journal.run_id, staged), final)
    if not where.metadata_in_place():
        _move(output_dir, _staged_name(journal.run_id, METADATA_FILE), METADATA_FILE)
    _finish_forward(output_dir, journal)


def _finish_forward(output_dir: str, journal: Journal) -> None:
    """The new metadata.json is in place: the earlier output's files go (which also frees
    the space the manifest needs), then the manifest says `committed`."""
    _remove_tree(output_dir, _aside(journal.run_id, ""))
    hook("cleared")
    write_manifest(output_dir, committed_manifest(journal.run_id, journal.final))
    hook("committed")


def _back(output_dir: str, journal: Journal, where: _Where) -> None:
    earlier = set(journal.previous)
    _drop_copies_at_finals(output_dir, journal, where)
    for staged, final in reversed(journal.moves):
        new_at_final = not where.staged(staged) and where.exists(final)
        if new_at_final and (final not in earlier or where.aside(final)):
            _move(output_dir, final, _staged_name(journal.run_id, staged))
    for name in reversed(journal.previous):
        if where.aside(name) and not where.exists(name):
            _move(output_dir, _aside(journal.run_id, name), name)
    remove_empty_index(output_dir)
    write_manifest(
        output_dir,
        committed_manifest(journal.previous_run_id, [*journal.previous, *journal.kept]),
    )


def _drop_copies_at_finals(output_dir: str, journal: Journal, where: _Where) -> None:
    """On gs:// a move is a copy then a delete: cut between the two, a new file is both
    staged and at its final name, where the earlier file could not come back (and a
    rollback then removed the run folder holding the only copy of the earlier file). The
    copy at the final name goes, the staged file stays; only a copy proven the run's own
    (the size and sha256 its new metadata.json lists) is deleted, and only where no earlier
    file is still at that name (it has none, or it is set aside): an earlier file with the
    same bytes is not the run's copy."""
    earlier = set(journal.previous) | set(journal.kept)
    copies = [
        final
        for staged, final in journal.moves
        if where.staged(staged)
        and where.exists(final)
        and (final not in earlier or where.aside(final))
    ]
    if not copies:
        return
    listing = where.new_listing()
    for final in copies:
        entry = listing.get(final)
        if entry is not None and where.holds(final, entry):
            files.delete([files.join(output_dir, final)])


def _staged_name(run_id: str, name: str) -> str:
    return f"{run_dir(run_id)}/{name}"


def _aside(run_id: str, name: str) -> str:
    return f"{run_dir(run_id)}/{PREVIOUS_DIR}/{name}".rstrip("/")


def _move(output_dir: str, source: str, target: str) -> None:
    """Rename one file of segprep's within the output; both folders are checked, every part
    of their paths (never a link: a run folder linked elsewhere would move a file that is
    not segprep's), and the target's made if missing."""
    if os.path.dirname(source):
        own_folder(output_dir, os.path.dirname(source), create=False)
    folder = os.path.dirname(target)
    if folder:
        own_folder(output_dir, folder)
    files.rename([files.join(output_dir, source)], [files.join(output_dir, target)])


def _remove_tree(output_dir: str, relative: str) -> None:
    path = files.join(output_dir, relative)
    if files.is_local(output_dir):
        import shutil

        own_folder(output_dir, relative, create=False)  # no part of the path is a link
        with contextlib.suppress(FileNotFoundError):
            if _is_real_folder(os.lstat(path)):
                shutil.rmtree(path)  # never follows a link inside the tree
        return
    files.delete_tree(path + "/")


_hooked: list[str] = []


def hook(step: str) -> None:
    """Stop here if the test hook names this step (once: a roll-forward passes it again)."""
    setting = os.environ.get(HOOK_VARIABLE)
    if not setting or setting.split(":", 1)[0] != step or _hooked:
        return
    _hooked.append(step)
    action = setting.split(":", 1)[1]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "term":
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next step
    else:
        with open(action, "rb") as fifo:  # blocks until the test opens it for writing
            fifo.read()
