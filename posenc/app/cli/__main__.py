"""``python -m posenc.app.cli``: the ``posenc`` command (as ``python -m posenc``)."""

import sys

from . import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
