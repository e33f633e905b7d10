"""What a run will take, before it runs: the dry run's `estimate` (docs/estimate.md).

Resource quantities, not money (prices change): entries and bytes to read, CPU seconds per
entry measured on a small calibration sample of the same inputs (timed in the writer's own
record code, `shard_work.build_record`), then vCPU-hours, memory GB-hours, shuffle GB,
workers and wall hours for the machine type and worker count given (Dataflow), or for this
machine (a local runner). A cost only from the user's own per-unit prices.

Reads inputs (a listing and ~50 entries), writes nothing.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from beam_pipeline.errors import UsageError
from transforms.pairing import Pair, Role, SourceFile, is_hidden

if TYPE_CHECKING:
    from beam_pipeline.launch.plan import RunPlan

CALIBRATION_ENTRIES = 50
# Dataflow's default batch worker (Runner v2) when --worker_machine_type is not given.
DEFAULT_MACHINE_TYPE = "n1-standard-1"
# GB of memory per vCPU of Compute Engine machine families (cloud.google.com/compute/docs/
# general-purpose-machines): FAMILY-KIND-N has N vCPUs and N times its family's GB.
_GB_PER_VCPU = {
    ("n1", "standard"): 3.75,
    ("n1", "highmem"): 6.5,
    ("n1", "highcpu"): 0.9,
    ("n2", "standard"): 4.0,
    ("n2", "highmem"): 8.0,
    ("n2", "highcpu"): 1.0,
    ("n2d", "standard"): 4.0,
    ("e2", "standard"): 4.0,
    ("e2", "highmem"): 8.0,
    ("e2", "highcpu"): 1.0,
    ("c2", "standard"): 4.0,
    ("c3", "standard"): 4.0,
}
_FAMILY_SIZE = re.compile(r"^([a-z0-9]+)-(standard|highmem|highcpu)-(\d+)$")
# Dataflow starts and stops its workers around the job: minutes that are billed too.
DATAFLOW_STARTUP_HOURS = 4 / 60
# Shuffles that carry every entry's paths: the job's own listing of gs:// folders
# (GroupFilesByKey), and the grouping of paths by shard (GroupPathsByShard).
SHUFFLES_REMOTE_LISTING = 2
SHUFFLES_LOCAL_LISTING = 1
# Each price flag (launch/options.PRICE_FLAGS) and the quantity it prices.
PRICE_FIELDS = {
    "price_vcpu_hour": "vcpu_hours",
    "price_gb_hour": "memory_gb_hours",
    "price_shuffle_gb": "shuffle_gb",
}


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What the listing says the run will read, and the calibration sample."""

    entries: int
    input_bytes: int
    sample: tuple[Pair, ...]


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    memory_gb: float


def machine_type(name: str) -> Machine:
    """vCPUs and memory of a Compute Engine machine type, from its family's ratio; a usage
    error naming the flag for any other name."""
    match = _FAMILY_SIZE.match(name)
    if match and (match[1], match[2]) in _GB_PER_VCPU:
        vcpus = int(match[3])
        return Machine(name, vcpus, vcpus * _GB_PER_VCPU[(match[1], match[2])])
    raise UsageError(
        f"--worker_machine_type {name}: not a machine type the estimate knows "
        "(FAMILY-standard|highmem|highcpu-N of n1, n2, n2d, e2, c2, c3; docs/estimate.md)"
    )


def local_machine() -> Machine:
    from beam_pipeline.runtime.writer_pool import usable_cores

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    return Machine("local", usable_cores(), round(memory, 1))


# --- the inputs --------------------------------------------------------------------------


def _spread(pairs: Iterator[Pair], total: int) -> Iterator[Pair]:
    """Every k-th pair of `total`, so the sample spans the listing, not its first folder."""
    step = max(1, total // CALIBRATION_ENTRIES)
    for index, pair in enumerate(pairs):
        if index % step == 0:
            yield pair


def _bytes_of(pair: Pair) -> int:
    mask = pair.mask.size if isinstance(pair.mask, SourceFile) else 0
    return pair.image.size + mask


def local_inputs(plan: RunPlan) -> Inputs:
    """The launcher's listing: its counts, and its staged pairs streamed once."""
    from beam_pipeline.runtime.local_listing import read_staged

    listing = plan.listing
    if listing is None:  # a dry run of folders that do not exist yet
        return Inputs(0, 0, ())
    staged = listing.staged
    total = 0
    sample: list[Pair] = []

    def pairs() -> Iterator[Pair]:
        for path in staged.pair_files:
            yield from read_staged(path, staged.record_limit)

    def counted() -> Iterator[Pair]:
        nonlocal total
        for pair in pairs():
            total += _bytes_of(pair)
            yield pair

    for pair in _spread(counted(), listing.paired):
        if len(sample) < CALIBRATION_ENTRIES:
            sample.append(pair)
    return Inputs(listing.discovered, total, tuple(sample))


def _objects(root: str) -> Iterator[tuple[str, int]]:
    """(relative name, size) of every object under a gs:// folder, streamed in name order."""
    from google.api_core import exceptions

    from transforms import files

    bucket, prefix = files.split_gcs(root)
    try:
        for blob in files.gcs_client().list_blobs(bucket, prefix=prefix):
            yield blob.name[len(prefix) :], blob.size or 0
    except exceptions.NotFound:  # no such bucket: nothing to read
        return


def remote_inputs(plan: RunPlan) -> Inputs:
    """A gs:// listing in flat memory: entries are the image files (a mask without its image
    is one entry too, counted apart); the sample is the first images' pairs."""
    layout = plan.layout
    entries = 0
    size = 0
    images: dict[str, SourceFile] = {}  # the first CALIBRATION_ENTRIES images, by key
    masks: dict[str, SourceFile] = {}
    for root, role in layout.roots():
        for relative, bytes_ in _objects(root):
            if is_hidden(relative) or layout.is_ignored(relative):
                continue
            if layout.is_input_file(root + relative):
                continue
            classified = layout.classify(relative, role)
            if classified is None:
                continue
            found, key = classified
            size += bytes_
            source = SourceFile(root + relative, bytes_)
            if found is Role.IMAGE:
                entries += 1
                if len(images) < CALIBRATION_ENTRIES:
                    images[key] = source
            elif key in images or len(masks) < 4 * CALIBRATION_ENTRIES:
                masks[key] = source
    sample = tuple(Pair(key, image, masks[key]) for key, image in images.items() if key in masks)
    return Inputs(entries, size, sample)


# --- calibration and the model ----------------------------------------------------------


def cpu_seconds_per_entry(plan: RunPlan, sample: tuple[Pair, ...]) -> float:
    """CPU seconds of this process per entry, building each sample entry's record with the
    writer's own code (reads, validation, conversion, encoding); 0.0 without a sample."""
    if not sample:
        return 0.0
    from beam_pipeline.job.shard_work import build_record

    settings = plan.job.writing
    build_record(settings, sample[0])  # imports and first-use costs are no per-entry cost
    started = time.process_time()
    for pair in sample:
        build_record(settings, pair)
    return (time.process_time() - started) / len(sample)


def _shards(plan: RunPlan, input_bytes: int) -> int:
    planning = plan.job.planning
    if planning.num_shards is not None:
        return max(planning.num_shards, planning.min_total_shards)
    by_size = math.ceil(input_bytes / ((planning.shard_size_mb or 100.0) * 1e6))
    return max(by_size, planning.min_total_shards)


def _dataflow_workers(plan: RunPlan) -> tuple[int, Machine]:
    from apache_beam.options.pipeline_options import WorkerOptions

    options = plan.pipeline_options().view_as(WorkerOptions)
    workers = options.max_num_workers or options.num_workers or 1
    return workers, machine_type(options.machine_type or DEFAULT_MACHINE_TYPE)


def estimate(plan: RunPlan) -> dict[str, Any]:
    """The dry run's `estimate` object, for Dataflow or this machine."""
    folders = (plan.layout.image_dir, plan.layout.mask_dir)
    remote = [folder for folder in folders if folder and not _is_local(folder)]
    if remote:
        from beam_pipeline.launch.credentials import check_credentials

        check_credentials(remote[0])  # the estimate reads the inputs: one line if it cannot
    inputs = remote_inputs(plan) if remote else local_inputs(plan)
    per_entry = cpu_seconds_per_entry(plan, inputs.sample)
    if plan.runner.dataflow:
        workers, machine = _dataflow_workers(plan)
        startup = DATAFLOW_STARTUP_HOURS
    else:
        workers, machine, startup = 1, local_machine(), 0.0
        machine = dataclasses.replace(machine, vcpus=max(1, plan.writer_processes))
    shuffles = SHUFFLES_REMOTE_LISTING if remote else SHUFFLES_LOCAL_LISTING
    pair_bytes = (
        sum(len(pickle.dumps(pair)) for pair in inputs.sample) / len(inputs.sample)
        if inputs.sample
        else 0.0
    )
    shards = _shards(plan, inputs.input_bytes)
    return model(
        inputs.entries,
        inputs.input_bytes,
        per_entry,
        pair_bytes * shuffles,
        shards,
        workers,
        machine,
        startup,
    )


def model(
    entries: int,
    input_bytes: int,
    per_entry: float,
    shuffled_per_entry: float,
    shards: int,
    workers: int,
    machine: Machine,
    startup_hours: float,
) -> dict[str, Any]:
    """The estimate from its measured parts (docs/estimate.md):

    CPU hours = entries x CPU seconds per entry / 3600; the busy cores are the workers'
    vCPUs, at most one per shard (a shard is one writer call); wall hours = CPU hours / busy
    cores + worker start-up; billed vCPU- and memory-hours are every worker's for the wall
    time; shuffle GB = entries x bytes shuffled per entry.
    """
    cpu_hours = entries * per_entry / 3600
    busy = max(1, min(workers * machine.vcpus, shards))
    wall = cpu_hours / busy + startup_hours if entries else 0.0
    return {
        "entries": entries,
        "input_bytes": input_bytes,
        "cpu_seconds_per_entry": round(per_entry, 6),
        "vcpu_hours": round(workers * machine.vcpus * wall, 6),
        "memory_gb_hours": round(workers * machine.memory_gb * wall, 6),
        "shuffle_gb": round(entries * shuffled_per_entry / 1e9, 6),
        "workers": workers,
        "wall_hours": round(wall, 6),
    }


def cost(estimate_: dict[str, Any], prices: dict[str, float]) -> dict[str, Any] | None:
    """The cost at the user's own per-unit prices (each optional); None without any."""
    if not prices:
        return None
    parts = {
        field: round(estimate_[quantity] * prices[field], 4)
        for field, quantity in PRICE_FIELDS.items()
        if field in prices
    }
    return {"prices": dict(prices), "parts": parts, "total": round(sum(parts.values()), 4)}


def _is_local(path: str | None) -> bool:
    return path is None or not path.startswith("gs://")
