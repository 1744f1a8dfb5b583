"""The service's core: the job store, the task queue and the settings.

Both faces build on it: the HTTP API (:mod:`service.app` and its routers) and the workers
(:mod:`worker`). The worker imports only from here, never from the API's routes.
"""
