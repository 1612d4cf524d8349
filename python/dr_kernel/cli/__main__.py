"""``python -m dr_kernel.cli``: the ``dr-kernel`` command."""

import sys

from . import main

sys.exit(main())
