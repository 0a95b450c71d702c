"""WebSocket URL routes; the consumers themselves live with their apps."""

from django.urls import URLPattern, path

from jobs.consumers import LiveConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/", LiveConsumer.as_asgi()),
]
