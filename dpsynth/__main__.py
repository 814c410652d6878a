"""``python -m dpsynth``: the ``dpsynth`` command line (:mod:`dpsynth.cli`)."""

import sys

from .cli import main

sys.exit(main())
