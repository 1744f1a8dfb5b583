import json

from lwl.experiments.compare import differences


def test_same_document_has_no_differences_and_timings_are_skipped():
    doc = {"err": [0.1, 0.2], "summary": {"mean": 0.15, "seconds": 12.0}, "wall_seconds": 3.0,
           "provenance": {"commit": "abc"}, "name": "g1", "ok": True}
    other = json.loads(json.dumps(doc))
    other["summary"]["seconds"] = 99.0
    other["wall_seconds"] = 1.0
    other["provenance"] = {"commit": "def"}
    assert differences(doc, other) == []
    other["err"][1] = 0.2 * (1 + 1e-9)  # round-off
    assert differences(doc, other) == []


def test_changed_numbers_lengths_keys_and_strings_are_named_by_path():
    old = {"columns": {"g1": {"err": [0.1, 0.2], "kept": 3, "family": "gaussian"}}}
    new = {"columns": {"g1": {"err": [0.1, 0.25], "kept": 3, "family": "auto", "extra": 1}}}
    lines = differences(new, old)
    assert "$.columns.g1.err[1]: 0.25, committed 0.2" in lines
    assert any(line.startswith("$.columns.g1.family") for line in lines)
    assert "$.columns.g1.extra: only in the new document" in lines
    assert differences({"a": [1, 2]}, {"a": [1, 2, 3]}) == ["$.a: 2 entries, committed 3"]
    assert differences({"a": True}, {"a": 1}) == ["$.a: True, committed 1"]
