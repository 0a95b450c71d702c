"""Reading TensorBoard event files into metric points (jobs/core/eventfiles.py): files written by torch's
SummaryWriter, read whole or in pieces cut anywhere, with damaged bytes reported rather than raised."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.core.eventfiles import metric_name, read_scalars, run_of
from tests.jobs.tensorboard_files import write_scalars


def test_a_summary_writers_scalars_become_points_with_step_value_and_time(tmp_path: Path) -> None:
    data = write_scalars(tmp_path, "train/loss", [1.0, 0.5, 0.25])
    found = read_scalars(data)
    assert found.consumed == len(data) and found.error == ""
    assert [(p.name, p.step, p.value) for p in found.points] == [
        ("train/loss", 0, 1.0), ("train/loss", 1, 0.5), ("train/loss", 2, 0.25)
    ]  # fmt: skip
    assert all(p.wall_time > 1e9 for p in found.points)


@pytest.mark.parametrize("cut", [1, 11, 12, 40, 87, 88, 89, 150])
def test_a_file_read_in_two_pieces_cut_anywhere_gives_each_point_once(tmp_path: Path, cut: int) -> None:
    data = write_scalars(tmp_path, "loss", [float(i) for i in range(6)])
    first = read_scalars(data[:cut])
    assert first.error == "", "a record cut short is not damage: its end comes with the next piece"
    rest = read_scalars(data[first.consumed :], tags=first.tags)
    assert first.consumed + rest.consumed == len(data)
    assert [p.step for p in first.points + rest.points] == list(range(6))


def test_damaged_bytes_stop_the_read_with_a_reason(tmp_path: Path) -> None:
    data = bytearray(write_scalars(tmp_path, "loss", [1.0, 2.0, 3.0]))
    whole = read_scalars(bytes(data))
    second_record = read_scalars(bytes(data[:100])).consumed
    data[second_record + 20] ^= 0xFF  # inside the second record's data
    damaged = read_scalars(bytes(data))
    assert damaged.consumed == second_record and "damaged" in damaged.error
    assert len(damaged.points) < len(whole.points)
    assert "damaged header" in read_scalars(b"this is not an event file at all").error


def test_tags_and_runs_become_valid_metric_names() -> None:
    assert metric_name("loss") == "loss"
    assert metric_name("loss", "eval") == "eval/loss"
    assert metric_name("top 1 (%)") == "top_1____"
    assert metric_name("1st") == "_1st"
    assert len(metric_name("x" * 100, "run")) == 64
    assert run_of("events.out.tfevents.1") == "" and run_of("eval/events.out.tfevents.1") == "eval"
