"""A module that never finishes importing: a gymnasium package whose import hangs (the spec probe's deadline test)."""

from __future__ import annotations

import time

time.sleep(3600)
