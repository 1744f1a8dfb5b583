"""How a design is judged: the paper's Err (:mod:`~lwl.evaluation.metrics`), the baselines
(:mod:`~lwl.evaluation.baselines`), held-out comparisons over training draws
(:mod:`~lwl.evaluation.comparison`), the verdict of an unbudgeted job
(:mod:`~lwl.evaluation.heldout`) and of a budgeted one at equal labels
(:mod:`~lwl.evaluation.equal_labels`, with the active-learning anchor :mod:`~lwl.evaluation.nipv`),
and the verdict's one-line text (:mod:`~lwl.evaluation.verdict_text`)."""
