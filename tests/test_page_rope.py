"""Chapter 12's RoPE explorable in a browser: its JavaScript rotation gives the scores of
attnlib.positions.rope_scores, and moving the query's position leaves the score unchanged
(it depends on the offset only).  The fit/contrast/respond checks of every explorable, this
one included, are in tests/test_page_explorables.py."""
from __future__ import annotations

import math

import pytest
import torch

from attnlib import explorables as xp
from attnlib.positions import rope_scores

from test_browser import SET_RANGE, Visit, browser, real, serve  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def rope_page(browser, real, tmp_path_factory):  # noqa: F811
    it = real["tokens"].index("it")
    fig = xp.rope_offset(real["q"][it], real["k"][1], "it", real["tokens"][1], max_offset=16, position=40)
    folder = tmp_path_factory.mktemp("rope")
    (folder / "index.html").write_text(xp.standalone_page([fig]), encoding="utf-8")
    visit = Visit(browser, serve(str(folder)) + "index.html")
    yield visit, fig, real["q"][it].double(), real["k"][1].double()
    visit.close()


def test_rope_explorable_scores_are_rope_scores_and_depend_on_the_offset_only(rope_page):
    visit, fig, q, k = rope_page
    page, uid = visit.page, fig.uid
    d_k = q.shape[0]
    seen = {}
    for i in (16, 40, 300):
        page.evaluate(SET_RANGE, [f"#{uid}-position", i])
        for off in (-16, -3, 0, 5, 16):
            page.evaluate(SET_RANGE, [f"#{uid}-offset", off])
            js = float(page.get_attribute(f"#{uid}", "data-score"))
            expected = rope_scores(q[None], k[None], [i], [i - off])[0, 0].item() / math.sqrt(d_k)
            assert js == pytest.approx(expected, abs=1e-5), (i, off)
            seen.setdefault(off, []).append(js)
    for off, values in seen.items():
        assert max(values) - min(values) < 1e-9, f"offset {off}: the score moved with i: {values}"
    assert len({round(v[0], 6) for v in seen.values()}) > 1, "the score should change with the offset"
    assert visit.errors == []
