"""The learner's side of the course: check() and hints in a notebook, the progress record, the
doctor, the workspace, and `ipulab course check` (a learner's self-check of notebooks)."""
