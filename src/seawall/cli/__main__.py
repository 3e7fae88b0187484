"""``python -m seawall.cli``: the ``seawall`` command."""

import sys

from seawall.cli import main

sys.exit(main())
