"""Trace files the simulator cannot replay are refused with a message, not a traceback."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.core.simulator import TraceError, load_trace

FILL_ONLY = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0000,12000,16384,1,1000\n"


def test_a_fill_only_trace_without_run_times_is_refused_naming_the_file_and_the_columns(tmp_path: Path):
    # the header of the trace's fill-only pod lists (openb_pod_list_multigpu50.csv, gpushare*, cpu*)
    pods = tmp_path / "openb_pod_list_multigpu50.csv"
    pods.write_text(FILL_ONLY)
    with pytest.raises(TraceError, match="creation_time, scheduled_time, deletion_time"):
        load_trace(pods)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nnode-0,64000,262144,8,G2\n")
    with pytest.raises(CommandError) as refused:
        call_command("simulate", trace=str(pods), nodes=str(nodes), stdout=StringIO())
    assert str(pods) in str(refused.value)
    assert "missing column(s) creation_time, scheduled_time, deletion_time" in str(refused.value)
    assert "no run times" in str(refused.value)
