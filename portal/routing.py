"""WebSocket URL routes; the consumers themselves live with their apps."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
