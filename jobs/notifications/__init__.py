"""Notifications when jobs change state (docs/notifications.md): subscriptions (a user's own jobs, or every
job of a tenant), one Notification per event and subscription, delivered by a Celery task to a signed
webhook, a Slack-compatible webhook or an e-mail address, with every attempt kept in a delivery log.

Modules: `choices` (channels, events, states), `models`, `signing` (HMAC-SHA256), `targets` (URL checks and
the guarded connection that refuses private addresses), `payloads`, `services` (the writes, and the hook
`lifecycle.transition` calls), `selectors` (the scoped reads), `delivery` (one attempt over a channel),
`tasks`, `api`, `views`."""
