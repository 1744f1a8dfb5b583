"""Uploaded datasets: an (M, d) array stored as ``.npy`` bytes with its shape and dtype, read
back by its owner."""

from __future__ import annotations

import io

import numpy as np
from sqlalchemy import insert, select

from service.core.store.engine import StoreEngine
from service.core.store.records import DatasetRecord
from service.core.store.rows import _json, _new_id
from service.core.store.tables import datasets


class DatasetStore(StoreEngine):
    """The datasets table."""

    def put_dataset(self, owner: str, array: np.ndarray) -> DatasetRecord:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        ds_id = _new_id()
        with self.engine.begin() as c:
            c.execute(insert(datasets).values(id=ds_id, owner=owner, shape=_json(list(array.shape)),
                                              dtype=str(array.dtype), nbytes=int(array.nbytes),
                                              data=buf.getvalue(), created_at=self._now))
        return self.get_dataset(ds_id, owner)

    def get_dataset(self, ds_id: str, owner: str | None = None) -> DatasetRecord | None:
        q = select(datasets.c.id, datasets.c.owner, datasets.c.shape, datasets.c.dtype, datasets.c.nbytes,
                   datasets.c.created_at).where(datasets.c.id == ds_id)
        if owner is not None:
            q = q.where(datasets.c.owner == owner)
        with self.engine.connect() as c:
            row = c.execute(q).mappings().first()
        return None if row is None else DatasetRecord.from_row(row)

    def load_dataset(self, ds_id: str, owner: str | None = None) -> np.ndarray:
        q = select(datasets.c.data).where(datasets.c.id == ds_id)
        if owner is not None:
            q = q.where(datasets.c.owner == owner)
        with self.engine.connect() as c:
            data = c.execute(q).scalar()
        if data is None:
            raise KeyError(ds_id)
        return np.load(io.BytesIO(data), allow_pickle=False)
