"""Code that makes `import tensorflow` fail, for subprocesses that must work without it."""

NO_TENSORFLOW = """
import sys

class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ImportError("tensorflow is not installed (test)")

sys.meta_path.insert(0, NoTensorFlow())
"""
