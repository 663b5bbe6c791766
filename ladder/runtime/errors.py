"""The two exceptions the kernels and the harness raise about what can run here.

Kept in a module of their own, below every other, so that any module may raise them.
"""


class NotAvailable(RuntimeError):
    """Something cannot run in this world (no GPU, GPU too old, library missing).

    Notebooks catch it and print its message instead of a traceback.
    """


class Spills(RuntimeError):
    """Raised by a tuner's compile(config) for a kernel that builds but keeps values in local memory (register
    spills): the search prunes it, since the register budget model let it through (see the tuners' prune)."""
