"""Matplotlib for files, never a window: every plot idcgen draws is saved as a PNG."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (imported late: matplotlib is slow to import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
