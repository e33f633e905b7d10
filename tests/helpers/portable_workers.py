"""Dataflow's workers, on this machine: Beam's EXTERNAL worker pool in a virtualenv of its own.

A Dataflow worker has only the package built from setup.py (what --setup_file gives it), its
own temp folder and home, and none of the launcher's memory. `worker_venv` builds that once
per test session: the wheel from a copy of the source tree, a venv without pip whose
dependencies come from the project's venv through a .pth path line (a path line does not run
the .pth files it names, so the editable finder that maps segprep to the checkout is not
installed there), and the wheel unpacked into the venv's own site-packages.
`worker_pool` runs `apache_beam.runners.worker.worker_pool_main` from that venv as a real
subprocess, with the venv's bin first on PATH (the pool starts each SDK worker as `python`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gcs_server import NO_METADATA_SERVER, free_loopback_port

REPO = Path(__file__).resolve().parents[2]
# What setup.py packages (pyproject.toml: packages.find, readme).
SOURCES = ("beam_pipeline", "transforms", "shard_reader", "pyproject.toml", "setup.py", "README.md")
POOL_START_SECONDS = 120  # a hang guard only


@dataclasses.dataclass(frozen=True)
class WorkerVenv:
    root: Path
    python: Path
    home: Path
    tmpdir: Path
    setup_file: Path  # the copy of setup.py the wheel was built from

    def env(self, **extra: str) -> dict[str, str]:
        """The workers' environment: the venv first on PATH, no PYTHONPATH, their own HOME
        and TMPDIR; the emulator and the closed metadata port as the launcher has them."""
        passed = ("STORAGE_EMULATOR_HOST", "GCE_METADATA_HOST", "GCE_METADATA_IP", "LANG")
        env = {name: os.environ[name] for name in passed if name in os.environ}
        env.setdefault("GCE_METADATA_HOST", NO_METADATA_SERVER)
        env.setdefault("GCE_METADATA_IP", NO_METADATA_SERVER)
        env.update(
            PATH=f"{self.python.parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
            HOME=str(self.home),
            TMPDIR=str(self.tmpdir),
            TF_CPP_MIN_LOG_LEVEL="3",
            **extra,
        )
        return env

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.home,  # not the checkout: `python -c` puts its folder first on sys.path
            timeout=120,
        )


def _build_wheel(root: Path) -> Path:
    """The wheel of a clean copy of the tree (no stale build/ of the checkout gets in)."""
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    wheels = root / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("segprep-*.whl")
    return wheel


def make_worker_venv(root: Path) -> WorkerVenv:
    wheel = _build_wheel(root)
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The project's dependencies, as a path line only.
    (site / "project_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site)]
        + [str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    home, tmpdir = root / "home", root / "tmp"
    home.mkdir()
    tmpdir.mkdir()
    return WorkerVenv(venv, python, home, tmpdir, wheel.parents[1] / "source" / "setup.py")


@pytest.fixture(scope="session")
def worker_venv(tmp_path_factory) -> WorkerVenv:
    """The workers' virtualenv, built once per test session."""
    return make_worker_venv(tmp_path_factory.mktemp("worker_venv"))


@dataclasses.dataclass
class WorkerPool:
    endpoint: str  # localhost:PORT, for --environment_config
    log: list[str]  # the pool's stderr lines so far

    def workers_started(self) -> int:
        return sum("Starting worker with command" in line for line in self.log)


@contextlib.contextmanager
def worker_pool(venv: WorkerVenv) -> Iterator[WorkerPool]:
    """Beam's EXTERNAL worker pool from `venv` as a subprocess.

    Ready once its gRPC port answers; its stderr is drained (so it never blocks) into the
    log; killed with its workers at the end."""
    port = free_loopback_port()
    process = subprocess.Popen(
        [str(venv.python), "-m", "apache_beam.runners.worker.worker_pool_main"]
        + [f"--service_port={port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=venv.env(),
        cwd=venv.home,
        start_new_session=True,  # its SDK workers are killed with it, as a group
    )
    lines: list[str] = []
    drain = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    drain.start()
    endpoint = f"localhost:{port}"
    try:
        _await_serving(endpoint, process, lines)
        yield WorkerPool(endpoint, lines)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=60)


def _await_serving(endpoint: str, process: subprocess.Popen, log: list[str]) -> None:
    """Block until the pool's gRPC server accepts a channel (or the pool exits)."""
    import grpc

    with grpc.insecure_channel(endpoint) as channel:
        ready = grpc.channel_ready_future(channel)
        try:
            ready.result(timeout=POOL_START_SECONDS)
        except grpc.FutureTimeoutError:
            raise RuntimeError(
                f"the worker pool did not serve (exit {process.poll()}): {''.join(log)[-2000:]}"
            ) from None
