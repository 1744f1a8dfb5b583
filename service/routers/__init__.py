"""One router per resource: operations (health, metrics, catalog), jobs and their results,
ask/tell, datasets. :func:`service.app.create_app` includes them."""
