"""The pure core of the jobs domain: no Django, no I/O, plain values in and out (an import-linter contract in
pyproject.toml keeps it so). Job states and their transition table (`states`), admission (`admission`, its
node index `nodepool`, the wording of why a job waits `waitreasons`), pod verdicts (`podstate`), reconcile's
decisions (`reconcile`), metric parsing (`metricparse`), the job spec and FfDL translation (`spec`, `ffdl`),
tenant policy checks on a spec (`policy`), GPU type aliases (`gputypes`), the vocabulary (`choices`), the
trace-driven simulators (`simulator`, `simulator_tuning`) and the tuner's detector and policy (`tuning`).
"""
