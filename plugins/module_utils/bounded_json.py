# Copyright: rocmlab contributors
# Apache License 2.0
"""A JSON document a host holds (a record rocmlab wrote there, read back): bounded, and every
way it can be wrong said in one sentence, never a traceback."""

from __future__ import annotations

import json


def parse(content: bytes, max_bytes: int, what: str):
    """CONTENT as JSON; ValueError "it is over N bytes", "it is nested too deep to be WHAT" or
    "it is not JSON (...)"."""
    if len(content) > max_bytes:
        raise ValueError(f"it is over {max_bytes} bytes")
    try:
        return json.loads(content.decode("utf-8"))
    except RecursionError as err:
        raise ValueError(f"it is nested too deep to be {what}") from err
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"it is not JSON ({err})") from err
