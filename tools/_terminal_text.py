"""Text from agents and models made safe to print on a person's terminal.

An agent's message is model output, and a prompt-injected model can write escape sequences:
printed raw, ESC and the other control characters move the cursor, hide or fake lines, or
write the terminal's clipboard (OSC 52); bidirectional overrides reorder what is shown. Each
such character is shown as its escape instead (`\\u001b`); line breaks and tabs stay.
"""

from __future__ import annotations

import re

__all__ = ("terminal_safe",)

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """`text` with every control and direction-changing character shown as its escape."""
    return _UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
