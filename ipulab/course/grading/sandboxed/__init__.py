"""What runs inside the sandbox: boot.py (the sandbox's first process: copies what it may see,
then runs and reports on the runner) and runner.py (the notebook's cells). Nothing here imports
the question bank, by structure: tests/test_layering.py follows every import from here."""
