"""``python -m posenc``: the same as the ``posenc`` command (see :mod:`posenc.app.cli`)."""

import sys

from .app.cli import main

if __name__ == "__main__":
    sys.exit(main())
