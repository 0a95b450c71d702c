"""Tenants: teams, memberships with roles, quotas, usage, and the one scoping helper."""
