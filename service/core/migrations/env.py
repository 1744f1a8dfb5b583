"""Alembic's environment for the job store: migrations run on the connection that
:func:`service.core.migrations.upgrade` hands over (no URL of its own, no logging setup)."""

from alembic import context

from service.core.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # the alembic command line: LWL_DATABASE_URL or the embedded default
    from sqlalchemy import create_engine

    from service.core.settings import get_settings
    from service.core.store.engine import private_sqlite_file

    url = get_settings().resolved_database_url()
    private_sqlite_file(url)  # a store the command line creates is the owner's only, as lwl's
    with create_engine(url).begin() as connection:
        context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
        context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    context.run_migrations()
