"""TensorBoard behind the portal: a job's event files synced from artifact storage into a local folder
(`sync`), one `tensorboard` process per viewed job (`manager`), and the view that proxies to it (`views`).
Reading scalars into metrics is elsewhere: jobs/core/eventfiles.py and jobs/services/tensorboard.py."""
