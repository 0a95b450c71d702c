"""The notifications page's form: it parses what a browser sends; the service validates and refuses."""

from __future__ import annotations

from typing import Any

from django import forms

from jobs.notifications.choices import Channel, Event, Scope
from tenants.models import Tenant


class SubscriptionForm(forms.Form):
    """A new subscription: tenant, scope, name, channel and target, events and minutes."""

    tenant = forms.ChoiceField()
    scope = forms.ChoiceField(choices=Scope.choices, initial=Scope.USER, widget=forms.RadioSelect)
    name = forms.CharField(max_length=100)
    channel = forms.ChoiceField(choices=Channel.choices, initial=Channel.WEBHOOK)
    url = forms.CharField(required=False, max_length=2000, label="URL (webhook and Slack)")
    email = forms.CharField(required=False, max_length=254, label="E-mail address")
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, initial=[Event.SUCCEEDED, Event.FAILED]
    )
    queued_minutes = forms.IntegerField(
        required=False,
        label="Minutes in the queue",
        widget=forms.TextInput(attrs={"inputmode": "numeric", "size": 6}),
    )

    def __init__(self, *args: Any, tenants: list[Tenant], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant = self.fields["tenant"]
        assert isinstance(tenant, forms.ChoiceField)
        tenant.choices = [(t.slug, t.name) for t in tenants]
        for name in ("name", "url", "email"):
            self.fields[name].widget.attrs["size"] = 48
