"""grain_index.checks: the argument checks of grain_index, for the packages built on it.

Every public entry point of grain_index checks its arguments with these, so a
bad call fails with the argument's name and the allowed range instead of deep
in numpy. The grain packages above (grain-dataset, grain-mp) check their own
arguments with the same functions, so that the whole stack words its errors
alike::

    >>> from grain_index import checks
    >>> checks.int_in_range(4, "batch_size", 1)
    4
    >>> checks.int_in_range(0, "batch_size", 1)
    Traceback (most recent call last):
    ...
    ValueError: `batch_size` must be >= 1, got 0.

Stability: a semi-public extension surface, not part of Grain's API. The names
and signatures here change only in a new minor version of grain-index, said in
its changelog; a package that uses them pins ``grain-index`` to a compatible
version. The implementation lives in the private ``grain_index._validate``:
import it from here, never from there.
"""

from grain_index._validate import UINT64_LIMIT as UINT64_LIMIT
from grain_index._validate import as_int as as_int
from grain_index._validate import finite_weights as finite_weights
from grain_index._validate import index_array as index_array
from grain_index._validate import int_in_range as int_in_range
from grain_index._validate import seed as seed

__all__ = ["UINT64_LIMIT", "as_int", "finite_weights", "index_array", "int_in_range", "seed"]
