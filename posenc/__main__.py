"""``python -m posenc``: the same as the ``posenc`` command (see :mod:`posenc.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
