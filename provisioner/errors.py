"""The one error type for mistakes a person can fix.

Raised anywhere in the package, caught once at the top of the CLI and printed as
one message with where it happened and how to fix it; a traceback only with --debug.
"""

from __future__ import annotations


class ProvisionError(Exception):
    """A user-facing error: what went wrong, where, and the fix."""

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        parts = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return "\n".join(parts)
