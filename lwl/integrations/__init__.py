"""Bridges from lwl's ask/tell jobs to lab software (optional extras: ``pip install 'lwl[lab]'``)."""
