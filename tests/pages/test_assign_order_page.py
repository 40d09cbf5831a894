"""AppTest: the order strategy on the assign page, and the simulation curves component."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from radconcord.backend.services.study_admin import assignment


def _submit(at, form: str, timeout: float = 60):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=timeout)


def test_assign_page_sets_the_adaptive_order(study_env, make_app):
    at = make_app(study_env.admin)
    at.switch_page("views/assign.py").run()
    assert not at.exception
    assert any("Now: **random**" in m.value for m in at.markdown)
    at.radio(key="order_strategy").set_value("adaptive")
    _submit(at, "order")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith(f"{study_env.study}: adaptive order for all, seed ")
    got = assignment.get_strategy(study_env.db, study_env.admin, study_name=study_env.study)
    assert (got.strategy, got.question) == ("adaptive", "all")
    # The study has no scores: a tau difference cannot be asked, and the page says why.
    at.radio(key="order_question").set_value("tau difference of two metrics")
    _submit(at, "order")
    assert not at.exception
    assert "question" in at.error[0].value
    got = assignment.get_strategy(study_env.db, study_env.admin, study_name=study_env.study)
    assert (got.strategy, got.question) == ("adaptive", "all")  # nothing changed


def _curves_app():
    import pandas as pd

    from radconcord.webapp.components.simulation_plot import simulation_plot

    rows = [{"strategy": s, "seed": k, "n_ratings": n, "ci_width": w * (1 + 0.1 * k),
             "quantity": "tau_diff", "question": "tau_diff:a,b"}
            for s, ws in (("random", (0.8, 0.5, 0.4)), ("adaptive", (0.6, 0.45, 0.4)))
            for k in (0, 1) for n, w in zip((10, 20, 30), ws, strict=True)]
    simulation_plot(pd.DataFrame(rows), {"random_ratings_to_target": 30,
                                         "adaptive_ratings_to_target": 20,
                                         "saved_to_target": 10, "tolerance": 0.05,
                                         "final_random_ci_width": 0.42, "total_ratings": 30})


def test_simulation_plot_draws_both_strategies_and_the_saving():
    at = AppTest.from_function(_curves_app).run()
    assert not at.exception
    fig = at.get("plotly_chart")[0].proto.spec
    assert '"random (mean of 2 seeds)"' in fig and '"adaptive (mean of 2 seeds)"' in fig
    assert "random needs 30 ratings, adaptive 20 of 30 (adaptive saves 10)" in at.caption[0].value


def test_simulation_figure_means_over_seeds():
    import pandas as pd

    from radconcord.webapp.components.simulation_plot import curves_frame, simulation_figure

    rows = [{"strategy": "random", "seed": k, "n_ratings": n, "ci_width": w}
            for k, ws in ((0, (0.5, 0.3)), (1, (0.7, 0.5))) for n, w in ((5, ws[0]), (9, ws[1]))]
    fig = simulation_figure(pd.DataFrame(rows))
    mean = next(t for t in fig.data if t.mode == "lines+markers")
    assert list(mean.x) == [5, 9] and list(mean.y) == [0.6, 0.4]
    # A job result is accepted as is.
    assert len(curves_frame({"curves": rows})) == 4
