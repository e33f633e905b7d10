"""`python -m beam_pipeline --image_dir ... --output_dir ...` runs the prepare job."""

import sys

from beam_pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main(["prepare", *sys.argv[1:]]))
