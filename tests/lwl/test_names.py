"""Candidates and baselines in words (lwl.names): the words themselves, a result's ``names``, and
the verdict sentences that say them instead of the internal ids."""

from lwl.evaluation.verdict_text import verdict_sentence
from lwl.names import names_of, words


def test_internal_ids_read_as_words():
    assert words("broadened_4") == "Q's fit broadened ×4"
    assert words("broadened_1.5", "gaussian") == "Q's fit broadened ×1.5"
    assert words("q_mixture") == words("mixture") == "Q's own mixture"
    assert words("given", "gaussian") == "the initial distribution"
    assert words("given", "auto") == "Q's mixture"  # under auto theta^0 is Q's mixture
    assert words("gaussian_broadened_2", "auto") == "Q's moment-matched Gaussian broadened ×2"
    assert words("nipv") == words("anchor") == "active learning (NIPV)"
    assert words("normal", "gaussian") == "the initial Gaussian"
    assert words("normal", "mixture") == "Q's moment-matched Gaussian"
    assert words("moved (round 6)") == "the design moved by bilevel steps (round 6)"
    assert words("member_2") == "Q's member 2" and words("member_2_fit") == "the family member nearest Q's member 2 (W2)"
    assert words("initial_particles") == "particle AMA's initial particles"
    assert words("q_fit", "particles") == "the log-normal KLE nearest Q's log-fields (W2)" != words("q_fit", "kle")
    assert words("interval_7.854", "interval") == "the interval law of ω from 2.5π"  # the EIT interval search's
    assert words("initial", "interval") == "the search's first interval of ω" != words("initial")
    assert words("interval_x", "interval") == "interval_x"
    assert words("a_plugin_baseline") == "a_plugin_baseline"  # an id it does not know stays as it is


def test_a_result_names_every_id_it_holds():
    result = {"verdict": {"best_baseline": "mixture", "selected": "broadened_3", "baselines": {"mixture": 0.3}},
              "evaluation": {"err": {"optimized": 0.2, "nipv": 0.4}},
              "labels_by_source": {"validation": 16, "broadened_3": 8, "initial": 5},
              "history": [{"scores": {"moment_matched": 0.5}, "incumbent": "broadened_3", "rival": "q_mixture"}]}
    names = names_of(result, "gaussian")
    assert names == {"mixture": "Q's own mixture", "broadened_3": "Q's fit broadened ×3", "optimized": "the design",
                     "nipv": "active learning (NIPV)", "validation": "Q's validation points",
                     "initial": "the lab's initial data", "moment_matched": "Q's moment-matched Gaussian",
                     "q_mixture": "Q's own mixture"}

    # the race's looks name their incumbent and whom Q's mixture overtook (the dashboard's race chart)
    raced = {"history": [{"race": {"incumbent": "given", "points_each": 300}},
                         {"race": {"incumbent": "broadened_2", "overtook": "broadened_2", "outcome": "rival won"}}]}
    assert names_of(raced, "gaussian") == {"given": words("given", "gaussian"), "broadened_2": "Q's fit broadened ×2",
                                           "q_mixture": "Q's own mixture"}
    assert names_of({"history": [{"round": 1, "race": None}]}) == {}


def test_verdict_sentences_say_words_not_ids():
    v = {"kind": "validation", "outcome": "better", "selected": "broadened_4", "best_baseline": "mixture",
         "points_each": 120, "err": 0.3, "best_baseline_err": 0.5, "ratio": 0.6, "z": 2.0, "basis": "b",
         "returned_initial": False}
    text = verdict_sentence(v)
    assert "Q's fit broadened ×4's points validate better than Q's own mixture's at 120 points each" in text
    assert "broadened_4" not in text
    audit = {"kind": "equal_labels", "labels": 300, "err": 0.27, "baselines": {"nipv": 0.4, "mixture": 0.35},
             "outcomes": {"nipv": "better", "mixture": "tie"}}
    assert "against active learning (NIPV) 0.4000 (better), Q's own mixture 0.3500 (tie)" in verdict_sentence(audit)


def test_a_budgeted_verdicts_warnings_name_baselines_in_the_jobs_family():
    from lwl.evaluation.equal_labels import verdict

    evaluation = {"err": {"optimized": 0.3, "initial": 0.2}, "labels": 4096, "audit_labels": 0,
                  "err_interval": {"optimized": [0.25, 0.35]},
                  "comparisons": {"initial": {"outcome": "worse", "other_err": 0.2}}}
    (warning,) = verdict(evaluation, family="interval")["warnings"]
    assert warning.startswith("at equal labels (4096) the search's first interval of ω trains a better model")
    assert "the initial distribution trains" in verdict(evaluation)["warnings"][0]
