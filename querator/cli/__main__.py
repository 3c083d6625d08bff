"""``python -m querator.cli``: the ``querator`` command."""

import sys

from querator.cli import main

sys.exit(main())
