"""The one error type library code raises; only the CLI prints it."""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_BUG = 70  # EX_SOFTWARE: anything not raised as a Ds4xError, printed with its traceback


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is, so that every temporary tree
    and partial file is removed on the way out, as for Ctrl-C."""


class Ds4xError(Exception):
    """A failure the user can act on: what went wrong, and the next step."""

    def __init__(
        self, message: str, hint: str | None = None, exit_code: int = EXIT_FAILED
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(Ds4xError):
    """Bad input: a pin, a series line, an option. Exit code 2."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint, EXIT_BAD_INPUT)
