"""``python -m cli``: the ``kernelsmith`` command (the device machine's scripts run it this way)."""

import sys

from cli.main import main

sys.exit(main())
