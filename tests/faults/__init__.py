"""Fault-injection suite: worker processes, protected resources, checkers, scenarios.

``python -m tests.faults --runs N`` runs every scenario N times with its protection on
and N times with it off, and prints the table (see ``docs/reliability.md``).
"""
