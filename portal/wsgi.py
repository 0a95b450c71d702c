"""WSGI entry point, for management tools that want one; the platform itself serves ASGI."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.local")
application = get_wsgi_application()
