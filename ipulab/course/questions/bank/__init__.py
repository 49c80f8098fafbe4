"""One module per guided notebook; importing it registers the set and its questions.
A new set (10 scaling to pods, ...) is a new module listed here."""
from . import (set01_one_tile, set02_bsp_supersteps, set03_the_exchange,  # noqa: F401
               set04_poplar_graph_api, set05_profiling, set06_matmul, set07_poplibs,
               set08_many_ipus, set09_bow2000_training, set10_scaling_to_pods,
               set11_sharing_a_pod)
