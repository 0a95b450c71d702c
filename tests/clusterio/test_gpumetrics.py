"""GPU utilisation per pod from DCGM exporter output (clusterio/gpumetrics.py): the exporter's own format,
a Prometheus federation's re-labelled one, the preferred metric, and exporters that are down or answer
with something else. The sample output (data/dcgm_exporter_metrics.txt) follows dcgm-exporter 3.x with its
Kubernetes mapping on: per-GPU series labelled with the pod, namespace and container holding the GPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterio import gpumetrics
from clusterio.errors import Unavailable
from tests.local_http import serving

SAMPLE = (Path(__file__).parent / "data" / "dcgm_exporter_metrics.txt").read_text()


def exporter_output(namespace: str = "ty-vision", pod: str = "job-0") -> str:
    return SAMPLE.replace("{namespace}", namespace).replace("{pod}", pod)


def test_each_pod_gets_the_mean_of_its_gpus_and_unheld_gpus_are_left_out() -> None:
    readout = gpumetrics.parse(exporter_output())
    assert readout == {("ty-vision", "job-0"): pytest.approx(0.83), ("ty-other", "someone-elses-0"): 0.12}


def test_a_federated_readout_with_exported_labels_is_read_too() -> None:
    text = exporter_output().replace('namespace="', 'exported_namespace="').replace('pod="', 'exported_pod="')
    assert gpumetrics.parse(text)[("ty-vision", "job-0")] == pytest.approx(0.83)


def test_the_engine_activity_ratio_is_preferred_where_exported() -> None:
    text = exporter_output() + (
        "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",namespace="ty-vision",pod="job-0"} 0.5\n'
    )
    readout = gpumetrics.parse(text)
    assert readout[("ty-vision", "job-0")] == 0.5  # not the 0.83 of DCGM_FI_DEV_GPU_UTIL
    assert readout[("ty-other", "someone-elses-0")] == 0.12  # the other pod still has its percentage


def test_learners_are_matched_by_namespace_and_pod_name() -> None:
    readout = gpumetrics.parse(exporter_output(pod="abc-a1-l0"))
    pods = {0: "abc-a1-l0", 1: "abc-a1-l1"}
    assert gpumetrics.for_pods(readout, "ty-vision", pods) == {0: pytest.approx(0.83)}
    assert gpumetrics.for_pods(readout, "ty-elsewhere", pods) == {}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_read_or_refused_with_a_value_error(text: str) -> None:
    try:
        readout = gpumetrics.parse(text)
    except ValueError:
        return
    assert all(0.0 <= value <= 1.0 for value in readout.values())


@pytest.fixture
def exporter() -> Iterator[str]:
    body = exporter_output()
    with serving(lambda: body) as url:
        yield url


def _closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"


def test_scrape_merges_the_exporters_that_answer(exporter: str) -> None:
    readout = gpumetrics.scrape([exporter, _closed_port_url()], timeout=2)
    assert readout[("ty-vision", "job-0")] == pytest.approx(0.83)


def test_scrape_says_unavailable_when_no_exporter_answers() -> None:
    with pytest.raises(Unavailable, match="GPU metrics could not be read"):
        gpumetrics.scrape([_closed_port_url()], timeout=2)
