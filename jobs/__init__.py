"""Jobs: the job model, spec and FfDL translator, scheduling, services, selectors, tasks, API, pages."""
