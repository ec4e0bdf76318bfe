"""``python -m boundedgate.redis inspect NAME``: print a cluster gate's live state."""

import sys

from ._inspect import main

sys.exit(main())
