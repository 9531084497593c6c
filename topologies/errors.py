"""The one exception type of the package."""


class TopologyError(ValueError):
    """A topology parameter, graph or route request is invalid.

    The message names the offending parameter (or node/edge) and how to fix it.
    Subclasses ``ValueError`` so callers that already catch bad values keep working.
    """
