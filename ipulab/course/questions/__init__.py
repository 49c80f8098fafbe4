"""The questions: the registry, the bank (one module per exercise set), the kit the checks are
built from and their messages, and `ipulab course build` (exercises from solutions)."""
