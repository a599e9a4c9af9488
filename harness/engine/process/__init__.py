"""Worker processes: born, walled in, armed, watched, killed and reaped.

The supervisor and what it stands on: the process tree and its cgroup, the wall (PID and
mount namespaces), the keeper and lifeline, CPU waits, the boundary tracer and the near-side
hooks a worker's Python loads, daemons and their settling, fake time, far-side crash points,
and what outlived its worker. May import ``store`` only.
"""
