#!/usr/bin/env python3
"""ds4x command line: `python build.py wheel --target vllm` (see README)."""

import sys

from ds4x.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
