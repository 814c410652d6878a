"""``python -m dpsynth.cli``: the ``dpsynth`` command line."""

import sys

from . import main

sys.exit(main())
