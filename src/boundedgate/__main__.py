"""``python -m boundedgate``: the command line (see ``boundedgate --help``)."""

from ._cli import main

raise SystemExit(main())
