# The metrics API's keyset index: (job, name, coalesce(step, log_seq), id). Built concurrently, so a
# table of millions of metric points keeps taking writes while it is made (hence atomic = False).

import django.db.models.functions.comparison
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0019_launch_lease_holds"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="metricsample",
            index=models.Index(
                models.F("job"),
                models.F("name"),
                django.db.models.functions.comparison.Coalesce(models.F("step"), models.F("log_seq")),
                models.F("id"),
                name="metric_job_name_x",
            ),
        ),
    ]
