"""``python -m verify``: the ``torchlean-verify`` command line."""

import sys

from .cli import main

sys.exit(main())
