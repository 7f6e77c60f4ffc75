"""What a preflight check finds: its status, what it saw, and the fix (shared by preflight's modules)."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "not checked"


@dataclass
class Finding:
    """What one preflight check found: its status (OK, WARN, FAIL, SKIP), what it saw, and the fix."""

    name: str
    status: str
    detail: str
    fix: str | None = None
