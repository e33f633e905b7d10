"""Helpers shared by the test modules: data builders, real processes, the GCS emulator.

Fixtures stay in tests/conftest.py; everything a test imports by name lives here.
"""
