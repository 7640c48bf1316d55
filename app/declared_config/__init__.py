"""The catalog declared in a file (``banditgate.yaml``): tenants with their API keys, rate limits and
routers, and the backends, applied to the database idempotently (``banditgate apply``, ``banditgate
serve --config``) and written back from it (``banditgate export``).

- ``schema``: the file's models, each object the admin API's own request body (plus the names of the
  environment variables that hold its secrets); ``banditgate config-schema`` prints their JSON schema.
- ``source``: reading the YAML with the line of every value, and the one-line errors that name them.
- ``apply``: the plan (what to create, change, reset, revoke or delete), carried out in one transaction
  through the admin API's own domain functions (app/catalog_admin.py).
- ``export``: the catalog as such a file, secrets as environment variable references.
"""
