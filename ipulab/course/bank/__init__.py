"""One module per guided notebook; importing it registers the set and its questions.
A new set is a new module listed here."""
from . import set01_one_tile  # noqa: F401
