from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0018_email_verification"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="launch_lease",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="job",
            name="launch_lease_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="held_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="held_on",
            field=models.CharField(blank=True, default="", max_length=300),
        ),
    ]
