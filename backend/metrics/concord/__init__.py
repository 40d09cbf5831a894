"""``concord``: RadConcord's own metric family, predicting the 12 ReXVal error counts.

Modules (none is imported here, so importing the package loads no model or numpy code):

* :mod:`.rules` — the ``rules`` variant: sentence analysis and error counting with evidence;
* :mod:`.features` — the pair features of the ``gbm`` variant;
* :mod:`.gbm` — gradient-boosted trees, fitted with scikit-learn, run with numpy;
* :mod:`.ce` — the cross-encoder of the ``ce`` variant;
* :mod:`.folder` — the trained-folder format (``concord.json``) shared by ``gbm`` and ``ce``;
* :mod:`.family` — the :class:`~.family.Concord` metric class the registry names.
"""
