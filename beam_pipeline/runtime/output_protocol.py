"""The output protocol: how a run owns, fills and publishes its output folder.

1. **Lock.** A run holds `.segprep/lock` for its whole life: locally an flock on that file
   (the kernel drops it when the process dies, however it dies), on gs:// an object created
   with a generation-match precondition. A second run is refused, naming the first.
2. **Staging.** Everything a run writes goes under its own `.segprep/runs/<run_id>/`. No file
   exists under a final name until the commit.
3. **Commit.** After accounting and the reject limit hold, as a journal that rolls forward or
   back and never strands the folder (runtime/commit_journal.py): the earlier output is moved
   aside, not deleted, until the new metadata.json is in place.
4. **Cleaning.** Only names the manifest (or a finished output's own metadata.json) lists are
   ever deleted, and only names segprep publishes; links are never followed (segprep's own
   folders are checked with lstat), and a file segprep did not write is never removed: one
   that would be overwritten stops the run instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import os
import socket
import stat
from collections.abc import Iterable

from beam_pipeline.runtime import commit_journal
from beam_pipeline.runtime.commit_journal import is_published_name, own_folder
from beam_pipeline.runtime.refusal import Refusal
from transforms import files, json_shape
from transforms.format.dataset_info import DatasetInfo, MetadataError
from transforms.format.naming import (
    COMMITTED,
    COMMITTING,
    INDEX_DIR,
    LOCK_FILE,
    MANIFEST_FILE,
    METADATA_FILE,
    REJECTS_FILE,
    RUNS_DIR,
    SEGPREP_DIR,
    UNLABELED_FILE,
    is_output_name,
    is_run_id,
    run_dir,
)
from transforms.limits import FILE_LIMITS


@dataclasses.dataclass(frozen=True)
class LockInfo:
    run_id: str
    host: str
    pid: int
    started_at: str
    remote: bool = False  # held for a job on a remote runner: released by its commit

    def describe(self) -> str:
        where = "a remote job launched" if self.remote else f"pid {self.pid}"
        return f"run {self.run_id} ({where} on {self.host}, since {self.started_at})"


@dataclasses.dataclass(frozen=True)
class OutputState:
    """A read-only look at an output folder, taken when the run is planned."""

    output_dir: str
    ours: tuple[str, ...]  # final names segprep wrote there (manifest or metadata.json)
    finished: bool  # a published output: metadata.json, and no commit left half done
    foreign: tuple[str, ...]  # top-level names segprep did not write
    holder: LockInfo | None  # a run holding the lock right now
    pending_commit: bool = False  # an earlier run's commit journal waits to be finished

    @property
    def colliding(self) -> tuple[str, ...]:
        """Foreign names a run would have to overwrite: never done (top-level names and the
        index/ tables alike)."""
        return tuple(
            name
            for name in self.foreign
            if (is_published_name(name) if "/" in name else is_output_name(name))
        )


def inspect_output(output_dir: str, *, holder: bool = True) -> OutputState:
    """What is in `output_dir` and whose it is; nothing is changed.

    `holder=False` skips the lock check: for the run that holds it.
    """
    names = _top_level_names(output_dir)
    for folder in (RUNS_DIR, INDEX_DIR):
        own_folder(output_dir, folder, create=False)
    manifest = commit_journal.read_manifest(output_dir) if SEGPREP_DIR in names else None
    pending = commit_journal.journal_of(manifest) is not None  # `committing` alone is no journal
    if manifest is not None:
        ours = tuple(str(name) for name in manifest["files"])
        finished = manifest.get("state") == COMMITTED and METADATA_FILE in names
    else:
        ours, finished = _legacy_output(output_dir, names)
    _refuse_links(output_dir, ours)
    listed = {name.split("/", 1)[0] for name in ours}
    foreign = [name for name in names if name != SEGPREP_DIR and name not in listed]
    if INDEX_DIR in listed:  # segprep's folder, but not every file in it need be
        foreign += sorted(set(_index_names(output_dir)) - set(ours))
    foreign = tuple(sorted(foreign))
    running = current_holder(output_dir) if holder and SEGPREP_DIR in names else None
    return OutputState(output_dir, ours, finished, foreign, running, pending)


def check_output(state: OutputState, *, overwrite: bool, append: bool = False) -> None:
    """Refuse, in one line, a run that would mix outputs or touch files that are not ours.

    `append`: the run adds a version to the finished output there (which it requires)."""
    out = state.output_dir
    if state.holder is not None:
        raise Refusal(f"{{output_dir}} {out} is in use by {state.holder.describe()}")
    if state.ours and not state.finished and not state.pending_commit:
        # Not a state segprep leaves (its commit keeps a journal until metadata.json is in
        # place): a manifest edited or written by someone else, or metadata.json removed.
        # Deleting what it lists could delete anyone's files.
        raise Refusal(
            f"{{output_dir}} {out}: its {MANIFEST_FILE} lists files (e.g. {state.ours[0]}) "
            f"but there is no finished output and no commit journal, so segprep cannot tell "
            "they are its own: nothing was changed (move them, or the folder, away)"
        )
    if append:
        if state.colliding:
            raise Refusal(
                f"{{output_dir}} {out} holds {state.colliding[0]}, which segprep did not write: "
                "move it away before appending"
            )
        if not state.finished and state.pending_commit:
            raise Refusal(
                f"{{output_dir}} {out} holds a commit an earlier run left unfinished: run "
                f"`segprep verify {{repair}} {out}` to finish it, then append (nothing was changed)"
            )
        if not state.finished:
            raise Refusal(
                f"{{append}} needs a finished segprep output in {{output_dir}} {out}: there is "
                "none (run `segprep prepare` without --append first)"
            )
        return
    if state.colliding:
        raise Refusal(
            f"{{output_dir}} {out} holds {state.colliding[0]}, which segprep did not write and "
            "would have to replace: choose a new folder or move it away (segprep never "
            "deletes files it did not write)"
        )
    if state.foreign and not overwrite and not state.ours:
        raise Refusal(
            f"{{output_dir}} {out} holds files segprep did not write (e.g. {state.foreign[0]}): "
            "choose a new folder, or pass --overwrite to write beside them (they are kept)"
        )
    if state.finished and not overwrite:
        raise Refusal(
            f"{{output_dir}} {out} already holds a finished segprep output: choose a new folder "
            "or pass --overwrite"
        )


def _top_level_names(output_dir: str) -> set[str]:
    if files.is_local(output_dir):
        path = output_dir.rstrip("/") or "/"
        if not os.path.lexists(path):
            return set()
        if not os.path.isdir(path) or os.path.islink(path.rstrip("/")):
            raise Refusal(f"{{output_dir}} {output_dir} is not a folder")
        with os.scandir(path) as scan:
            names = {item.name for item in scan}
        segprep = os.path.join(path, SEGPREP_DIR)
        if SEGPREP_DIR in names and (os.path.islink(segprep) or not os.path.isdir(segprep)):
            raise Refusal(
                f"{{output_dir}} {output_dir}: {SEGPREP_DIR} is not segprep's folder (a link or "
                "a file): choose a new folder"
            )
        return names
    return {path[len(output_dir) :].split("/", 1)[0] for path in files.list_dir(output_dir)}


def _index_names(output_dir: str) -> list[str]:
    """`index/NAME` of every file in the output's index/ folder (own_folder has refused a
    link there)."""
    folder = files.join(output_dir, INDEX_DIR)
    if files.is_local(output_dir):
        if not os.path.isdir(folder):
            return []
        with os.scandir(folder) as scan:
            return [f"{INDEX_DIR}/{item.name}" for item in scan]
    prefix = files.normalize_dir(folder)
    return [f"{INDEX_DIR}/{path[len(prefix) :]}" for path in files.list_dir(prefix)]


def _legacy_output(output_dir: str, names: set[str]) -> tuple[tuple[str, ...], bool]:
    """An output without a readable manifest (written before manifests, or its manifest is
    damaged): its metadata.json says what it wrote."""
    if METADATA_FILE not in names:
        return (), False
    info = _read_json(files.join(output_dir, METADATA_FILE))
    if not (isinstance(info, dict) and "segprep" in (info.get("versions") or {})):
        return (), False  # someone else's metadata.json: foreign like any other file
    try:  # the one reader of metadata.json knows every file an output lists
        listed = sorted(DatasetInfo.from_json(info).listed_files())
    except MetadataError:
        listed = [ref.get("file") for ref in info.get("tfds_files") or [] if isinstance(ref, dict)]
        for split in (info.get("splits") or {}).values():
            refs = [split.get("key_table") or {}]
            for shard in split.get("shards") or []:
                if isinstance(shard, dict):
                    refs += [shard, shard.get("index") or {}]
            listed += [ref.get("file") for ref in refs if isinstance(ref, dict)]
    if isinstance(info.get("num_unlabeled"), dict):
        listed.append(UNLABELED_FILE)
    ours = [name for name in listed if is_published_name(name)]
    ours += [name for name in (REJECTS_FILE, METADATA_FILE) if name in names]
    return tuple(sorted(set(ours))), True


def _refuse_links(output_dir: str, names: Iterable[str]) -> None:
    """segprep writes only regular files: a link under one of its names is someone else's."""
    if not files.is_local(output_dir):
        return
    for name in names:
        path = os.path.join(output_dir, name)
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
            raise Refusal(
                f"{{output_dir}} {output_dir}: {name} is not a file segprep wrote (a link or a "
                "folder): move it away"
            )


def _read_json(path: str):
    try:
        return json_shape.loads(files.read_bounded(path, FILE_LIMITS.metadata_bytes), path)
    except (OSError, ValueError):
        return None


# --- the lock --------------------------------------------------------------------------


def _process_start(pid: int) -> str | None:
    """The kernel's start time of `pid`: tells a live process from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _lock_info(run_id: str, *, remote: bool) -> LockInfo:
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return LockInfo(run_id, socket.gethostname(), os.getpid(), started, remote)


def current_holder(output_dir: str) -> LockInfo | None:
    """The run holding the lock now, or None (no lock, or a stale one from a dead process)."""
    path = files.join(output_dir, LOCK_FILE)
    if files.is_local(output_dir):
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _parse_lock(os.read(descriptor, 1 << 16)) or LockInfo(
                    "?", socket.gethostname(), 0, "now"
                )
            return None
        finally:
            os.close(descriptor)
    info = _parse_lock(_read_remote_lock(output_dir))
    if info is None or _is_stale(info):
        return None
    return info


def _parse_lock(data: bytes | None) -> LockInfo | None:
    try:
        fields = json_shape.loads(data or b"", "the output lock")
        return LockInfo(**{key: fields[key] for key in LockInfo.__dataclass_fields__})
    except (ValueError, TypeError, KeyError):
        return None


def _is_stale(info: LockInfo) -> bool:
    """A gs:// lock left by a process of this host that is gone; remote jobs are never stale."""
    if info.remote or info.host != socket.gethostname():
        return False
    return _process_start(info.pid) is None


def _read_remote_lock(output_dir: str) -> bytes | None:
    from google.api_core import exceptions

    try:
        return _lock_blob(output_dir).download_as_bytes()
    except exceptions.NotFound:
        return None


class RunLock:
    """The exclusive lock of one run on its output folder (a context manager)."""

    def __init__(self, output_dir: str, run_id: str, *, remote: bool = False) -> None:
        self.output_dir = output_dir
        self.info = _lock_info(run_id, remote=remote)
        self._descriptor: int | None = None
        self._generation: int | None = None
        self._created: list[str] = []  # local folders this run made, innermost first

    def __enter__(self) -> RunLock:
        if files.is_local(self.output_dir):
            self._acquire_local()
        else:
            self._acquire_remote()
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is not None and files.storage_gone(self.output_dir):
            # The failure's own message matters more than minutes of retried deletes; a
            # lock whose process is gone is stale to the next run of this host.
            self._generation = None
            return
        self.release()
        if error is not None:
            self._remove_created()

    def _remove_created(self) -> None:
        """After a failed or interrupted run: the folders it made (.segprep/ and its runs/,
        a new output folder and its new parents) go again if they are empty, innermost
        first. rmdir removes nothing but an empty folder and follows no link, so a folder
        that holds anything (a refused run's rejects.jsonl, a user's file) stays, and so
        does every folder around it."""
        for path in self._created:
            try:
                os.rmdir(path)
            except OSError:
                return

    def _acquire_local(self) -> None:
        folder = os.path.join(self.output_dir, SEGPREP_DIR)
        missing = []
        path = os.path.abspath(folder)
        while not os.path.lexists(path) and path != os.path.dirname(path):
            missing.append(path)
            path = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        if missing and missing[0] == os.path.abspath(folder):  # then its runs/ is new too
            self._created = [os.path.abspath(os.path.join(self.output_dir, RUNS_DIR)), *missing]
        if os.path.islink(folder):
            raise Refusal(f"{{output_dir}} {self.output_dir}: {SEGPREP_DIR} is a link")
        path = os.path.join(self.output_dir, LOCK_FILE)
        while True:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                descriptor = os.open(path, flags, 0o644)
            except OSError as error:  # a link (ELOOP), a folder, no permission, no space
                why = (
                    "it is a link, not segprep's"
                    if error.errno == errno.ELOOP
                    else error.strerror or type(error).__name__
                )
                raise Refusal(
                    f"{{output_dir}} {self.output_dir}: its lock {LOCK_FILE} cannot be opened "
                    f"({why}); nothing was changed"
                ) from None
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                # O_NOFOLLOW stops a symbolic link, not a hard one: a second name means
                # the lock's bytes are someone's file, which the lock would overwrite.
                os.close(descriptor)
                raise Refusal(
                    f"{{output_dir}} {self.output_dir}: its lock {LOCK_FILE} is not a file of "
                    "segprep's own (a hard link to another file, or not a regular file); "
                    "nothing was changed (move it away)"
                )
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _parse_lock(os.read(descriptor, 1 << 16))
                os.close(descriptor)
                who = holder.describe() if holder else "another run that is starting"
                raise Refusal(f"{{output_dir}} {self.output_dir} is in use by {who}") from None
            # The holder before us may have unlinked the file as we opened it: lock the
            # file that is at the path now, or try again.
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(descriptor).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(descriptor)
        os.ftruncate(descriptor, 0)
        os.write(descriptor, json.dumps(dataclasses.asdict(self.info)).encode())
        self._descriptor = descriptor

    def _acquire_remote(self) -> None:
        """Create the lock object only if there is none (generation 0), or replace exactly the
        stale one that was read: a run that races us gets a failed precondition."""
        from google.api_core import exceptions

        blob = _lock_blob(self.output_dir)
        expected = 0
        with contextlib.suppress(exceptions.NotFound):
            blob.reload()
            holder = _parse_lock(blob.download_as_bytes(if_generation_match=blob.generation))
            if holder is not None and not _is_stale(holder):
                raise Refusal(f"{{output_dir}} {self.output_dir} is in use by {holder.describe()}")
            expected = blob.generation
        try:
            blob.upload_from_string(
                json.dumps(dataclasses.asdict(self.info)), if_generation_match=expected
            )
        except exceptions.PreconditionFailed:
            holder = current_holder(self.output_dir)
            who = holder.describe() if holder else "another run that is starting"
            raise Refusal(f"{{output_dir}} {self.output_dir} is in use by {who}") from None
        blob.reload()
        self._generation = blob.generation

    @property
    def generation(self) -> int | None:
        """The gs:// lock object's generation: a remote job's commit releases exactly it."""
        return self._generation

    def detach(self) -> None:
        """Leave the lock in place for a remote job whose commit releases it."""
        self._generation = None

    def release(self) -> None:
        if self._descriptor is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.output_dir, LOCK_FILE))
            os.close(self._descriptor)  # unlocks
            self._descriptor = None
        elif self._generation is not None:
            release_remote_lock(self.output_dir, self._generation)
            self._generation = None


def _lock_blob(output_dir: str):
    bucket, name = files.split_gcs(files.join(output_dir, LOCK_FILE))
    return files.gcs_client().bucket(bucket).blob(name)


def release_remote_lock(output_dir: str, generation: int) -> None:
    """Delete the gs:// lock if it is still the one with `generation`."""
    from google.api_core import exceptions

    with contextlib.suppress(exceptions.NotFound, exceptions.PreconditionFailed):
        _lock_blob(output_dir).delete(if_generation_match=generation)


def release_lock_of(output_dir: str, run_id: str) -> None:
    """A remote job's commit ends its run: delete the gs:// lock if this run still holds it."""
    from google.api_core import exceptions

    blob = _lock_blob(output_dir)
    try:
        blob.reload()
        holder = _parse_lock(blob.download_as_bytes(if_generation_match=blob.generation))
    except exceptions.NotFound:
        return
    if holder is not None and holder.run_id == run_id:
        release_remote_lock(output_dir, blob.generation)


# --- staging, cleaning, commit -----------------------------------------------------------


def staging_dir(output_dir: str, run_id: str) -> str:
    """This run's staging folder, ending in '/'."""
    return files.join(output_dir, run_dir(run_id)) + "/"


def make_staging_dir(output_dir: str, run_id: str) -> str:
    """Create this run's staging folder (local; gs:// has no folders); its path."""
    staged = staging_dir(output_dir, run_id)
    if files.is_local(output_dir):
        os.makedirs(output_dir, exist_ok=True)  # the output folder itself may be new
    own_folder(output_dir, f"{run_dir(run_id)}/{INDEX_DIR}")  # writers create no folders
    return staged


def recover(output_dir: str) -> str | None:
    """Finish a commit cut short (forward or back, runtime/commit_journal.py); what was
    done, None when there was nothing to finish. Called with the lock held."""
    journal = commit_journal.journal_of(commit_journal.read_manifest(output_dir))
    return None if journal is None else commit_journal.recover(output_dir, journal)


def recover_locked(output_dir: str) -> str | None:
    """`recover` under a lock of its own: for a run that must read the output as it will be
    (an append plans on the latest metadata.json) before its own lock is taken."""
    with RunLock(output_dir, "recover-" + os.urandom(4).hex()):
        return recover(output_dir)


def remove_ended_runs(out: str) -> None:
    """Before a run (with the lock held, after `recover`): remove the staging folders of runs
    that ended, only entries named as a run's id (naming.is_run_id); anything else under
    .segprep/runs is the user's and stays."""
    runs = files.join(out, RUNS_DIR)
    if files.is_local(out):
        own_folder(out, RUNS_DIR, create=False)
        if os.path.isdir(runs):
            for item in os.listdir(runs):
                if is_run_id(item):
                    _remove_local_tree(os.path.join(runs, item))
    else:
        try:
            names = files.listdir(runs + "/")
        except FileNotFoundError:
            return
        for item in names:
            if is_run_id(item):
                files.delete_tree(f"{runs}/{item}/")


def repair(output_dir: str) -> list[str]:
    """`segprep verify --repair`: under the lock, finish a commit cut short, clear staging
    folders of runs that ended, and an empty index/; what was done, one line each."""
    done: list[str] = []
    if SEGPREP_DIR not in _top_level_names(output_dir):
        return done  # not written under the protocol: nothing of segprep's to finish
    with RunLock(output_dir, "repair-" + os.urandom(4).hex()):
        outcome = recover(output_dir)
        if outcome is not None:
            done.append(outcome)
        state = inspect_output(output_dir, holder=False)
        if state.ours and not state.finished:
            raise Refusal(
                f"{output_dir} holds an unfinished output without a commit journal (an older "
                "segprep's, or an edited manifest): nothing proves its listed files segprep's, "
                "so nothing was changed; move them (or the folder) away, then run `segprep "
                "prepare`"
            )
        remove_ended_runs(output_dir)
        commit_journal.remove_empty_index(output_dir)
    return done


def outcome_of(output_dir: str, run_id: str) -> str:
    """What a run that failed left published, read from the folder: the truth for its
    last line."""
    try:
        manifest = commit_journal.read_manifest(output_dir)
    except Refusal:
        manifest = None
    state = (manifest or {}).get("state")
    if state == COMMITTED and manifest.get("run_id") == run_id:
        return "its commit had finished: the new output is published"
    journal = commit_journal.journal_of(manifest) if state == COMMITTING else None
    if journal is not None and journal.run_id == run_id:
        if commit_journal.metadata_in_place(output_dir, journal):
            return (
                "the new output is published (its metadata.json is in place) but the manifest "
                f"could not be finished: `segprep verify --repair {output_dir}` finishes it"
            )
    if state == COMMITTING and manifest.get("run_id") == run_id:
        return (
            "the commit was cut short and not undone: `segprep verify --repair "
            f"{output_dir}` (or the next run) completes or undoes it"
        )
    if _is_there(output_dir, METADATA_FILE):
        return "nothing was published; the earlier output is in place"
    return "nothing was published"


def _remove_local_tree(path: str) -> None:
    """shutil.rmtree never follows links inside the tree; a link itself is just unlinked."""
    import shutil

    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)


def discard_staged(output_dir: str, run_id: str, *, keep: Iterable[str] = (REJECTS_FILE,)) -> None:
    """After a failed run: drop its staged files, keeping what explains the failure."""
    staged = staging_dir(output_dir, run_id)
    kept = set(keep)
    if files.is_local(output_dir):
        if not os.path.isdir(staged):
            return
        for name in os.listdir(staged):
            if name not in kept:
                _remove_local_tree(os.path.join(staged, name))
        if not os.listdir(staged):
            os.rmdir(staged)
        return
    files.delete([path for path in files.list_dir(staged) if path[len(staged) :] not in kept])


def publish(
    output_dir: str,
    run_id: str,
    moves: list[tuple[str, str]],
    metadata: bytes,
    *,
    keep: Iterable[str] = (),
) -> None:
    """Move a run's staged files to their final names; metadata.json last.

    `moves` are (name in the run's staging folder, final name in `output_dir`); `keep` are
    names of the earlier output that stay as they are (`segprep index` adds files to an
    output), every other earlier name is moved aside and removed once the new metadata.json
    is in place. Cut short anywhere, the commit rolls back (or forward) from its journal.
    """
    import hashlib

    previous = inspect_output(output_dir, holder=False)
    colliding = [
        name
        for _, name in moves
        if name in previous.foreign or name.split("/", 1)[0] in previous.foreign
    ]
    if colliding:
        raise Refusal(
            f"{output_dir}{colliding[0]} appeared during the run and segprep did not write it: "
            "nothing was published"
        )
    for name in [name for move in moves for name in move]:
        if not is_published_name(name):
            raise ValueError(f"{name!r} is not a name segprep publishes")
    kept = set(keep)
    earlier = [name for name in previous.ours if name not in kept and _is_there(output_dir, name)]
    manifest = (
        files.read_bounded(files.join(output_dir, MANIFEST_FILE), FILE_LIMITS.metadata_bytes)
        if (previous.ours and _is_there(output_dir, MANIFEST_FILE))
        else b"{}"
    )
    journal = commit_journal.Journal(
        run_id=run_id,
        previous_run_id=str(_run_id_of(manifest)),
        previous=tuple(earlier),
        kept=tuple(sorted(kept)),
        moves=tuple(moves),
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
    )
    names = [*journal.to_json()["files"], *(staged for staged, _ in moves)]
    commit_journal.check_space(output_dir, len(metadata) + commit_journal.manifest_bytes(names))
    commit_journal.run(output_dir, journal, metadata)
    if files.is_local(output_dir):
        _remove_local_tree(staging_dir(output_dir, run_id).rstrip("/"))
    else:
        files.delete_tree(staging_dir(output_dir, run_id))


def _run_id_of(manifest: bytes) -> str:
    try:
        return json_shape.loads(manifest, MANIFEST_FILE).get("run_id") or ""
    except (ValueError, AttributeError):
        return ""


def _is_there(output_dir: str, name: str) -> bool:
    path = files.join(output_dir, name)
    if files.is_local(output_dir):
        return os.path.lexists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def protocol_problems(
    names: set[str], manifest: dict | None, lock_held: bool, listed_by_metadata: set[str]
) -> list[str]:
    """What `segprep verify` finds wrong with a finished output's protocol state.

    `names`: the top-level names in the folder; `manifest`: the parsed manifest, None when
    absent (an output of segprep before the manifest: nothing more to check); `lock_held`:
    a run holds the lock right now; `listed_by_metadata`: the files metadata.json names.
    """
    problems = []
    if lock_held:
        problems.append(f"{LOCK_FILE}: a run is writing into this folder right now")
    if manifest is None:
        return problems
    if manifest.get("state") != COMMITTED:
        problems.append(
            f"{MANIFEST_FILE}: state {manifest.get('state')!r}: a commit did not finish "
            "(`segprep verify --repair` completes or undoes it)"
        )
    listed = manifest.get("files") or []
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        problems.append(f"{MANIFEST_FILE}: `files` is not a list of names: damaged or tampered")
        return problems
    files = set(listed)
    published = {name for name in names if is_output_name(name.split("/", 1)[0])}
    for name in sorted(name for name in published - files if "/" not in name):
        problems.append(f"{name}: a published name the manifest does not list")
    for name in sorted(files - published):
        problems.append(f"{name}: listed in the manifest but missing")
    for name in sorted(listed_by_metadata - files):
        problems.append(f"{name}: in metadata.json but not in the manifest")
    return problems
