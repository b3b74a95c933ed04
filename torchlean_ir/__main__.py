"""``python -m torchlean_ir``: the ``torchlean`` command line (see :mod:`torchlean_ir.cli`)."""

import sys

from .cli import main

sys.exit(main())
