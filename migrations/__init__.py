"""Alembic migrations; ``app.store.migrate.upgrade`` runs them programmatically."""
