"""The one exception type the reference raises for bad input."""


class GRPOInputError(ValueError):
    """Bad input to a stage function or the trainer; the message is one line that names the cause."""
