"""Field types of snapshot records, shared by the loader's record Structs and the history
report's input (service/rules/history.py): msgspec validates each record against them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

Instant = Annotated[datetime, msgspec.Meta(tz=True)]  # aware: a zone or an offset is required
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
# A count within JSON's exact integers (2**53 - 1), as the tools' output schema bounds it.
Counter = Annotated[int, msgspec.Meta(ge=0, le=9007199254740991)]
