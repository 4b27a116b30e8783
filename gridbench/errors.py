"""The one error type a user can fix: the CLI prints it as one line and exits 2."""


class UserError(Exception):
    """Bad input or an unmet precondition, with a message that says how to fix it."""
