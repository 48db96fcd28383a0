"""``python -m examples.marketdata [options]``: run the demo (``make demo``)."""

import sys

from .demo import main

sys.exit(main())
