"""factory_boy factories for test data."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model

from jobs.models import Job
from tenants.models import Quota, Tenant
from tenants.services import membership_set


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"team{n}")
    name = factory.LazyAttribute(lambda o: f"Team {o.slug}")
    quota = factory.RelatedFactory("tests.factories.QuotaFactory", factory_related_name="tenant")


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    gpus = 8
    cpu_millis = 32000
    memory_mib = 65536
    max_running_jobs = 4
    max_queued_jobs = 10


def member(tenant: Tenant, role: str = "member", **user_fields: Any) -> Any:
    """A new user with `role` in `tenant`, permissions synced as the services do it."""
    user = UserFactory(**user_fields)
    membership_set(tenant=tenant, user=user, role=role)
    return user


SPEC = {"name": "train", "image": "pytorch/pytorch:2.3", "command": ["python", "-c", "print(1)"]}


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    tenant = factory.SubFactory(TenantFactory)
    owner = factory.SubFactory(UserFactory)
    name = "train"
    spec = factory.LazyFunction(lambda: dict(SPEC))
