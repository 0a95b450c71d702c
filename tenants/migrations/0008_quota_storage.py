from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0007_idle_gpu_halt"),
    ]

    operations = [
        migrations.AddField(
            model_name="quota",
            name="storage_gib",
            field=models.PositiveIntegerField(
                default=500,
                help_text="Total storage (GiB) the claims of the tenant's jobs may request together: checkpoint "
                "claims count from a job's first launch until the job is deleted (halted and finished jobs keep "
                "theirs).",
            ),
        ),
        migrations.AddField(
            model_name="quota",
            name="max_claims",
            field=models.PositiveIntegerField(
                default=50,
                help_text="How many PersistentVolumeClaims the tenant's jobs may hold together (one per learner, "
                "or one per job with shared checkpoints), counted as storage_gib is.",
            ),
        ),
        migrations.AddField(
            model_name="policy",
            name="job_claims",
            field=models.CharField(
                choices=[
                    ("none", "none (a pvc volume never mounts a job's checkpoint claim)"),
                    ("own", "the submitter's own jobs' claims"),
                    ("tenant", "any job's of the tenant (members share checkpoints)"),
                ],
                default="none",
                help_text="Which jobs' checkpoint claims (ty-<job>-ckpt…) a pvc volume may mount: none (default), "
                "the submitter's own jobs', or any job's of the tenant. Other claims the platform makes never.",
                max_length=8,
            ),
        ),
    ]
