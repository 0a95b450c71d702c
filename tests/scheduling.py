"""How `make test` spreads the suite over pytest-xdist's workers (docs/testing.md, "Parallel runs").

Each test file is one unit of work, run whole on one worker (xdist's `loadfile`), so a file's module and
package fixtures (a server, a browser) start once. Two changes to xdist's `loadfile`:

- the files that take longest go out first, so no worker is left with a two-minute file once the others are
  done: the files of `GROUPS`, then every file with a `slow` test (kubesim, a server, a browser), then the
  rest, in the order collected. xdist's own order (the files with the most tests first) sends the long
  end-to-end files, which hold one or two tests each, last;
- the files of one group in `GROUPS` are one unit: they run on one worker, one after the other;
- the files of `ALONE` are one unit, sent last, once every other worker is done: tests that read how much
  CPU a job gets or keep to a time budget, which three other workers' kubesims, servers and training jobs
  would take from them (the others stay idle then, each holding back its last test, as xdist's workers do,
  until the run ends).
"""

from __future__ import annotations

from typing import Any

import pytest

GROUPS = {
    # The session's `installed_cli` (a pip install into a fresh venv: a minute on a busy machine) is built
    # once, not once per worker.
    "tests/cli/test_install.py": "installed-cli",
    "tests/e2e/test_day_one_live.py": "installed-cli",
}
ALONE_UNIT = "alone"
ALONE = {
    # The tuner must find a CPU-starved job CPU-bound: beside other workers it got too little CPU to report
    # its speed at all.
    "tests/jobs/test_tuning_engine.py",
    # The live schema test keeps to a 60 s budget.
    "tests/portal/test_schema.py",
}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def order_for_workers(items: list[pytest.Item]) -> None:
    """Reorder a worker's collection (every worker collects alike) as the module docstring says."""
    slow_files = {_file(item.nodeid) for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        path = _file(item.nodeid)
        return 3 if path in ALONE else 0 if path in GROUPS else 1 if path in slow_files else 2

    items.sort(key=rank)  # stable: a file's tests stay together and in their order


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's `loadfile` scheduler, with `GROUPS` as units and the collection's order kept."""
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = _file(nodeid)
            return ALONE_UNIT if path in ALONE else GROUPS.get(path, path)

        def _reschedule(self, node: Any) -> None:
            # The ALONE unit (last in the queue) waits until every worker is down to the one test it holds
            # back (a worker runs its last test only once it has more work or is told to stop).
            waiting = list(self.workqueue) == [ALONE_UNIT] and not node.shutting_down
            if waiting and any(self._pending_of(work) > 1 for work in self.assigned_work.values()):
                return
            super()._reschedule(node)

    config.option.loadscopereorder = False
    return Scheduling(config, log)
