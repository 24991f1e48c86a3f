"""The one error type for bad input, from the command line, the web form, a workload file or a profile."""


class InputError(ValueError):
    """A misconfiguration, as one line naming what is wrong and the fix: ``--option: problem (fix)``
    for an option, ``path.to.field: problem`` for a field of a file. Raised before any load starts."""
