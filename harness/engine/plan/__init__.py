"""What to run: scenario files, ``--set`` overrides, steps and cases, certify's plan (a bad
one refused before anything starts), the workload drawn from a seed, credentials, the
providers' specs, templates of a program's settings and the calls into a user's glue.

May import ``store`` and ``process``; never runs a case.
"""
