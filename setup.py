"""Shim for Dataflow's --setup_file: all metadata lives in pyproject.toml."""

import setuptools

setuptools.setup()
