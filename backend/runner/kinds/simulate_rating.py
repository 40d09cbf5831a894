"""Kind ``simulate_rating``: replay a rated study under random and adaptive orders.

Params (written by :func:`backend.services.evaluation.simulation.enqueue_simulation`, the same as
the
``simulate-rating`` command): ``study``, ``strategy``, ``seeds``, ``question``, ``seed``,
``resamples``, ``significant_only``. The result is
:meth:`backend.services.evaluation.simulation.SimulationOutput.as_json`: the curves as JSON records
(strategy, seed, n_ratings, ci_width, quantity, question), ``savings``
(:func:`backend.analysis.adaptive.savings_summary`: how many ratings adaptive needs to reach
the random order's CI widths; null unless both strategies ran) and ``summary``, that in one
sentence (the job's message). Nothing is written.
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import JobContext
from radconcord.backend.runner.kinds._common import param


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Run the replays on the worker.

    Raises:
        NotFound: the study is gone.
        InvalidInput: bad params, or a study the simulation cannot run on.
    """
    from radconcord.backend.services.evaluation import simulation

    study = param(params, "study", str)
    ctx.progress(0, 0, f"replaying {study}")
    out = simulation.simulate_study(
        ctx.db, ctx.actor, study_name=study,
        strategy=param(params, "strategy", str, "both"),
        seeds=param(params, "seeds", int, 20),
        question=param(params, "question", str, "all"),
        seed=param(params, "seed", int, 0),
        resamples=param(params, "resamples", int, 200),
        significant_only=param(params, "significant_only", bool, False),
        progress=ctx.progress,
    ).as_json()
    s = out["savings"]
    if s and s["saved_to_target"] is not None:
        out["summary"] = (f"CI width within {s['tolerance']:.0%} of the final "
                          f"{s['final_random_ci_width']:.3f}: adaptive after "
                          f"{s['adaptive_ratings_to_target']} ratings, random after "
                          f"{s['random_ratings_to_target']} (of {s['total_ratings']})")
    else:
        out["summary"] = (f"{len(out['curves'])} curve points ({', '.join(out['strategies'])}, "
                          f"{len(out['seeds'])} seed(s))")
    return out
