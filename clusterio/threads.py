"""Thread-pool sizing for learner containers, from the container's CPU limit.

Numerical libraries size their pools from the host's core count (`os.cpu_count()`, `/proc/cpuinfo`),
not from the container's cgroup CPU quota, so a 2-CPU learner on a 128-core node starts 128 threads
and thrashes (the oversubscription NEARCHUS measured). The platform therefore sets the variables
these libraries actually read, sized from the CPU *limit* it gives the container.

Variables set, and who reads them:

- `OMP_NUM_THREADS`: OpenMP runtimes; PyTorch's intra-op pool (`torch.get_num_threads()`) and
  MKL-DNN/oneDNN follow it.
- `MKL_NUM_THREADS`: Intel MKL (numpy/scipy MKL builds, PyTorch's MKL ops).
- `OPENBLAS_NUM_THREADS`: OpenBLAS (pip numpy/scipy wheels).
- `BLIS_NUM_THREADS`: BLIS / AMD AOCL builds.
- `VECLIB_MAXIMUM_THREADS`: Apple Accelerate; harmless elsewhere, set for images built on macOS bases.
- `NUMEXPR_NUM_THREADS`, `NUMEXPR_MAX_THREADS`: numexpr (pandas' eval); the max must not be below
  the number or numexpr caps it at its default of 64.
- `TF_NUM_INTRAOP_THREADS`, `TF_NUM_INTEROP_THREADS`: TensorFlow's two pools (read by
  `tensorflow/core/common_runtime/process_util.cc`); both default to the host's cores.
- `TRAINYARD_DATALOADER_WORKERS`: a hint only, for `torch.utils.data.DataLoader(num_workers=...)`:
  one CPU is left to the training loop; 0 means "load in the main process".
- `TRAINYARD_TORCH_INTEROP_THREADS`: a hint only, for `torch.set_num_interop_threads(...)`; PyTorch's
  inter-op pool is only settable from code (the example script, examples/train/train.py, applies it).

Not set: `TORCH_NUM_THREADS`, because PyTorch does not read it (its intra-op pool follows
`OMP_NUM_THREADS`).
"""

from __future__ import annotations

THREAD_ENV_NAMES: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)
DATALOADER_WORKERS_ENV = "TRAINYARD_DATALOADER_WORKERS"
TORCH_INTEROP_ENV = "TRAINYARD_TORCH_INTEROP_THREADS"


def threads_for_cpu(cpu_millis: int) -> int:
    """Return the thread count a container limited to `cpu_millis` should use: ceil(cpu), at least 1.

    Rounds up so a 1.5-CPU container can use its second, partly granted core; never looks at the
    machine it runs on.
    """
    if isinstance(cpu_millis, bool) or not isinstance(cpu_millis, int) or cpu_millis < 1:
        raise ValueError(f"cpu_millis must be a positive integer, got {cpu_millis!r}")
    return max(1, -(-cpu_millis // 1000))


def thread_env(cpu_millis: int) -> dict[str, str]:
    """Return the environment that sizes every known thread pool to a CPU limit of `cpu_millis`."""
    threads = threads_for_cpu(cpu_millis)
    env = dict.fromkeys(THREAD_ENV_NAMES, str(threads))
    env[DATALOADER_WORKERS_ENV] = str(threads - 1)
    env[TORCH_INTEROP_ENV] = str(threads)
    return env
