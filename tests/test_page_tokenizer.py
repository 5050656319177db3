"""The page's WordPiece tokenizer (``attnlib/static/wordpiece.js``) in headless Chromium gives
the tokens, ids and token type ids of the model's own tokenizer (Hugging Face ``tokenizers``,
from :func:`attnlib.encoder.load_encoder`) on several hundred texts and sentence pairs:
English prose, accents, CJK, emoji, numbers, very long words, URLs, control characters, right
to left scripts, markup, quotes and dashes, plus 150 seeded random mixtures.  Its normaliser
and pre-tokenizer are also checked on every Unicode code point, its defaults against
tokenizer.json, and its errors (empty text, too long, not a string) are checked.

Runs in the unit pass (no book build).  Chromium is found as in tests/test_browser.py; without
it the module is skipped, or fails under ``ATTNLIB_REQUIRE_BROWSER=1``.
"""
from __future__ import annotations

import json
import random
import re
import shutil
import unicodedata
from pathlib import Path

import pytest

from attnlib import corpus
from attnlib.encoder import default_model_dir

from test_browser import Visit, browser, serve  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "attnlib" / "static" / "wordpiece.js"
EMPTY = "type a sentence: the text is empty or only spaces"

# Texts by theme.  Each is compared alone; PAIRS below are compared as (A, B).
PROSE = [
    corpus.RUNNING, *corpus.BEARS.values(), *corpus.PAIR, *corpus.PADDED_BATCH, *corpus.SINK_PROBES,
    *re.split(r"(?<=[.!?])\s+", corpus.load_text().strip()),
    *[p for p in re.split(r"[,;.]\s*|\s--\s", corpus.load_text()) if p.strip()],
    "Attention lets every token look at every other token.", "Queries, keys and values are linear maps.",
    "The softmax turns scores into weights that sum to one.", "Why does the model attend to [SEP] so often?",
    "I can't believe it's already Tuesday!", "Dr. Smith arrived at 9:30 a.m. on Jan. 5th.",
    "The U.S.A. and the U.K. signed the treaty.", "She said: \"Don't go there.\"",
    "Well... maybe; maybe not?!", "The model's weights (384-dimensional) were frozen.",
    "Hello [MASK] world", "[CLS] inside the text [SEP] and [PAD] and [UNK]", "a[MASK]b[[SEP]]", "[cls] [Mask]",
]
ACCENTS = ["café", "naïve", "Ångström", "RÉSUMÉ", "Résumé", "CAFÉ CRÈME BRÛLÉE", "Zürich", "São Paulo",
           "Œuvre", "Straße STRASSE", "ﬁnancial ﬂow", "Ǆemal", "İstanbul ıi", "ΣΊΣΥΦΟΣ σοφός ΑΣ",
           "Dvořák Łódź Čapek", "Ærøskøbing", "ñandú", "crème brûlée à la mode", "Ḁ ḁ ẞ",
           "e\u0301 vs \u00e9", "a\u0308\u0304 o\u0328\u0301", "x\u0300\u0301\u0302\u0303\u0304",
           "\u0301starts with a mark", "Z\u0351\u0352a\u0353\u0354l\u0355g\u0356o", "Ⅻ ⅻ ① ²³ ½"]
CJK = ["中文字符", "日本語のテキスト", "한국어", "我爱北京天安门。", "東京タワーは高い", "漢字かなカナ",
       "中文English混合", "𠀀𠀁 𪜀 𫝀 𫠠 𬺰 丽", "a\U0002b820b a\U0002b920b", "ㄅㄆㄇ ㆍ ᄀ",
       "한국어 텍스트입니다", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ　１２３！", "「引用」『二重』、。"]
EMOJI = ["😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "I ❤️ NY", "🏳️\u200d🌈 flag", "🇫🇷🇯🇵",
         "smile😀inside", "🥰🥲🫠 new emoji", "keycap 1\ufe0f\u20e3", "👩🏽\u200d💻 coder", "☕️ ♠ ★ ✓"]
NUMBERS = ["1,024", "3.14159", "4,294,967,296", "-273.15°C", "1e-9 and 6.02e23", "$1,000,000.00",
           "50% of 200 is 100", "2024-01-31 12:34:56", "v1.2.3-rc.4", "0x1F600 0b1010", "١٢٣ ٤٥٦",
           "१२३ ๑๒๓", "3½ ¾", "№ 5 and #42"]
LONG = ["a" * 150, "z" * 99, "z" * 100, "z" * 101, "é" * 100, "é" * 101, "😀" * 100, "😀" * 101,
        "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "antidisestablishmentarianism " * 3, "word " * 60, "x" * 99 + "-" + "y" * 101,
        "a" * 100 + "\u0301", "a\u0301" * 100, "中" * 120, "ab" * 50 + "c"]
WEB = ["https://example.com/path?query=1&b=two#frag", "http://localhost:8000/index.html",
       "user.name+tag@example.co.uk", "mailto:someone@example.org", "ftp://files.example.net/a_b-c.txt",
       "www.attention-is-all-you-need.org", "C:\\Users\\me\\file.txt", "/usr/bin/env python3",
       "@handle #hashtag", "snake_case camelCase kebab-case", "<script>alert(1)</script>",
       "<img src=x onerror=alert(1)>", "<b>bold</b> &amp; &lt;tag&gt;", "{\"json\": [1, 2, 3]}",
       "a+b=c; x*y/z", "print('hello') # comment", "`code` ~tilde~ ^caret^ |pipe|"]
CONTROL = ["\x00", "a\x00b", "\x07bell", "zero\u200bwidth", "soft\u00adhyphen", "\ufeffbom", "rep\ufffdlacement",
           "tab\there", "new\nline", "cr\rlf\r\n", "\x0bvt\x0cff", "nel\x85x", "\x1c\x1d\x1e\x1f",
           "\x7f\x80\x9f", "rtl\u200fmark\u200e", "\u202eoverride\u202c", "priv\ue000ate \U000f0000",
           "word\u2060joiner", "\u00a0nbsp\u00a0", "em\u2003space ideo\u3000space", "line\u2028sep\u2029",
           "\u180emongolian", "unassigned\u0378x", "ar\u0890b new\u13430cf", "  leading and trailing  ",
           "\t\n mixed \r\n whitespace \t", "a\x00\x00\x00b", "\x00hidden\x00"]
RTL = ["مرحبا بالعالم", "שלום עולם", "العربية: نص، مع ترقيم؟", "עִבְרִית עם ניקוד", "English then عربي then English",
       "كَتَبَ الوَلَدُ", "فارسی ۱۲۳", "اردو زبان", "ܫܠܡܐ", "Ǹ ǹ ﷺ"]
MIXED = ["Привет, мир!", "Γειά σου Κόσμε", "Ελληνικά ΚΕΦΑΛΑΙΑ", "हिन्दी भाषा", "ภาษาไทย", "ქართული",
         "Հայերեն", "አማርኛ", "தமிழ்", "Tiếng Việt có dấu", "Русский text 中文 עברית 😀",
         "Latin+Кириллица+Ελληνικά", "ᚠᚢᚦᚨᚱᚲ", "𝐌𝐚𝐭𝐡 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝟙𝟚𝟛", "ⓐⓑⓒ", "ℌ℘ℑ", "∑∫√∞≠≤ ∀x∈ℝ",
         "→ ← ↔ ⇒", "©®™ §¶ †‡", "‰ ‱ ′ ″", "᚛ᚋᚐ᚜", "Ꭰ Ꮳ", "𐌰𐌱𐌲", "⠓⠑⠇⠇⠕"]
QUOTES = ["don't", "don’t", "‘single’ “double”", "«guillemets» ‹single›", "„German“ ‚quotes‘",
          "「Japanese」", "`backtick' ''two''", "It's the model's", "rock 'n' roll", "'quoted'",
          "\"straight\"", "l'homme qu'il", "O’Neil’s", "5′ 10″", "ʼokina Hawaiʻi"]
DASHES = ["well-known", "1990–2000", "pause — then", "minus −5", "a‐b a‑b a‒b", "one―two", "﹣small﹘",
          "－full", "a--b", "a---b", "-leading", "trailing-", "⸺ ⸻", "wait ... what…", "⁓swung",
          "x⹃y ⹝ newer dashes"]
PAIRS = [
    corpus.PAIR, ("The cat sat on the mat.", "It was warm."), ("Where is the station?", "Two streets away."),
    ("café", "CAFÉ"), ("中文", "日本語"), ("😀", "👍🏽"), ("1,024", "3.14159"), ("don't", "“quoted”"),
    ("مرحبا", "שלום"), ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>"),
    ("tab\there", "new\nline"), ("a" * 101, "b" * 100), ("Hello [MASK]!", "[SEP] inside"),
    ("one", "two"), ("Is it raining?", "No, it is sunny."), ("x", "y"), ("RÉSUMÉ", "résumé"),
    ("https://example.com", "user@example.org"), ("well-known", "1990–2000"), ("ΑΣ", "ας"),
    *[(a, b) for a, b in zip(corpus.SINK_PROBES, corpus.SINK_PROBES[1:])],
    *[(a, b) for a, b in zip(corpus.PADDED_BATCH, corpus.BEARS.values())],
]
# Characters the random texts are made of: every theme above, and spaces.
POOL = sorted(set("".join(ACCENTS + CJK + EMOJI + NUMBERS + WEB + CONTROL + RTL + MIXED + QUOTES + DASHES))
              | set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") | {"\u0301", "\u0308", "\u200d"})


def random_texts(n: int = 150, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = " ".join(PROSE).split()
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.3:
                parts.append(rng.choice(words))
            else:
                parts.append("".join(rng.choice(POOL) for _ in range(rng.randint(1, 8))))
        texts.append(rng.choice(["", " ", "\t"]).join(parts) if rng.random() < 0.2 else " ".join(parts))
    return texts


SINGLES = PROSE + ACCENTS + CJK + EMOJI + NUMBERS + LONG + WEB + CONTROL + RTL + MIXED + QUOTES + DASHES
ENCODE_ALL = """(cases) => cases.map(([a, b]) => {
  try { return tok.encode(a, b); } catch (e) { return {error: e.name + ": " + e.message}; } })"""


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):  # noqa: F811
    folder = tmp_path_factory.mktemp("wordpiece")
    shutil.copyfile(SCRIPT, folder / "wordpiece.js")
    (folder / "index.html").write_text('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                                       '<title>tokenizer</title><script src="wordpiece.js"></script></head>'
                                       '<body></body></html>\n', encoding="utf-8")
    visit = Visit(browser, serve(str(folder)) + "index.html")
    vocab = (default_model_dir() / "vocab.txt").read_text(encoding="utf-8")
    visit.page.evaluate("(v) => { window.vocabText = v; window.tok = AttnlibWordPiece.fromVocab(v); }", vocab)
    yield visit
    assert visit.errors == [] and visit.external == [] and visit.failed == []
    visit.close()


@pytest.fixture(scope="module")
def hf(encoder):
    """The model's tokenizer, as attnlib.encoder.load_encoder() returns it (conftest fixture)."""
    return encoder[1]


def reference(tokenizer, a, b=None):
    """The Python tokenizer's encoding, or the JS error expected for a text with no token."""
    if not tokenizer(a, add_special_tokens=False)["input_ids"]:
        return {"error": "Error: " + EMPTY}
    if b is not None and not tokenizer(b, add_special_tokens=False)["input_ids"]:
        return {"error": "Error: type a second sentence"}
    enc = tokenizer(a, b)
    ids = enc["input_ids"]
    types = enc["token_type_ids"]
    return {"tokens": tokenizer.convert_ids_to_tokens(ids), "ids": ids, "typeIds": types,
            "sentenceBStart": types.index(1) if b is not None else None}


def compare(page, tokenizer, cases):
    got = page.page.evaluate(ENCODE_ALL, [[a, b] for a, b in cases])
    bad = []
    for (a, b), js in zip(cases, got):
        want = reference(tokenizer, a, b)
        same = js.get("error", "").startswith(want["error"]) if "error" in want else js == want
        if not same:
            bad.append(f"text {a!r}" + (f" + {b!r}" if b is not None else "") +
                       f"\n  python: {want.get('tokens', want.get('error'))} {want.get('ids', '')}"
                       f"\n  page:   {js.get('tokens', js.get('error'))} {js.get('ids', '')}")
    return len(cases), bad


def test_page_tokens_ids_and_types_equal_the_model_tokenizer(page, hf):
    cases = [(t, None) for t in SINGLES + random_texts()] + [(a, b) for a, b in PAIRS] + \
            [(a, None) for a, _ in PAIRS]
    n, bad = compare(page, hf, cases)
    assert n >= 480 and len(PAIRS) >= 30
    assert not bad, f"{len(bad)} of {n} texts differ:\n" + "\n".join(bad[:20])


def test_normaliser_and_pre_tokenizer_agree_on_every_code_point(page, hf):
    """Each code point alone (between separators): BertNormalizer and BertPreTokenizer."""
    backend = hf.backend_tokenizer
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != ord("|")]
    # "|" is left alone by the normaliser and made by none of its steps: one piece per code point.
    text = "".join(chr(c) + "|" for c in cps)
    js_norm, js_pre = page.page.evaluate(
        "(t) => { const n = tok.normalize(t); return [n, tok.preTokenize(t.replace(/[|]/g, 'a'))]; }", text)
    py_norm = backend.normalizer.normalize_str(text)
    py_pre = [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text.replace("|", "a"))]
    assert js_pre == py_pre, next(f"pre-tokenizer differs first at {p!r} (python) vs {j!r} (page)"
                                  for p, j in zip(py_pre + [""], js_pre + [""]) if p != j)
    py_parts, js_parts = py_norm.split("|"), js_norm.split("|")
    assert len(py_parts) == len(js_parts) == len(cps) + 1
    unexplained, newer = [], []
    for c, p, j in zip(cps, py_parts, js_parts):
        if p != j:
            ch = chr(c)
            # Tolerated: the Rust normaliser's NFD tables are older than the browser's, so a
            # character Python's Unicode database does not know, or one that Rust leaves
            # undecomposed, may differ (U+11938, Todhri, Tulu-Tigalari, Kirat Rai, ...).
            if unicodedata.category(ch) == "Cn" or (unicodedata.normalize("NFD", ch) != ch and p == ch.lower()):
                newer.append(c)
            else:
                unexplained.append(f"U+{c:04X} {unicodedata.name(ch, '?')}: python {p!r}, page {j!r}")
    assert not unexplained, "\n".join(unexplained[:30])
    assert len(newer) < 100, f"{len(newer)} code points differ: {[hex(c) for c in newer[:20]]}"


def test_defaults_are_the_model_tokenizer_settings(page):
    folder = default_model_dir()
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    norm, model = spec["normalizer"], spec["model"]
    assert norm["type"] == "BertNormalizer" and spec["pre_tokenizer"]["type"] == "BertPreTokenizer"
    assert model["type"] == "WordPiece" and model["continuing_subword_prefix"] == "##"
    single = [next(iter(s.values()))["id"] for s in spec["post_processor"]["single"]]
    pair = [(next(iter(s.values()))["id"], next(iter(s.values()))["type_id"]) for s in spec["post_processor"]["pair"]]
    assert single == ["[CLS]", "A", "[SEP]"]
    assert pair == [("[CLS]", 0), ("A", 0), ("[SEP]", 0), ("B", 1), ("[SEP]", 1)]
    defaults = page.page.evaluate("AttnlibWordPiece.defaults")
    assert defaults == {
        "lowercase": norm["lowercase"], "stripAccents": norm["strip_accents"],
        "handleChineseChars": norm["handle_chinese_chars"], "cleanText": norm["clean_text"],
        "unkToken": model["unk_token"], "clsToken": "[CLS]", "sepToken": "[SEP]",
        "maxInputCharsPerWord": model["max_input_chars_per_word"], "maxLength": config["model_max_length"],
        "specialTokens": [t["content"] for t in spec["added_tokens"] if not t["normalized"]],
    }
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert {t: i for i, t in enumerate(vocab)} == model["vocab"], "vocab.txt and tokenizer.json disagree"


def test_empty_texts_throw_the_empty_error(page):
    for a, b in [("", None), ("   ", None), ("\t\n\r ", None), ("\x00\x07\u200b", None), ("\u3000", None),
                 ("ok", ""), ("ok", "  \n")]:
        err = page.page.evaluate(ENCODE_ALL, [[a, b]])[0].get("error", "")
        assert err.startswith("Error: type a") and "empty" in err, (a, b, err)
    assert page.page.evaluate(ENCODE_ALL, [["", None]])[0]["error"] == "Error: " + EMPTY


def test_non_strings_throw_a_type_error(page):
    for a, b in [(None, None), (5, None), ({"text": "x"}, None), (["a"], None), ("ok", 7)]:
        err = page.page.evaluate(ENCODE_ALL, [[a, b]])[0].get("error", "")
        assert err.startswith("TypeError: text ") and "must be a string" in err, (a, b, err)


def test_length_limit_is_512_tokens_with_cls_and_sep(page, hf):
    fits, over = "the " * 510, "the " * 598
    assert len(hf(fits)["input_ids"]) == 512 and len(hf(over)["input_ids"]) == 600
    out = page.page.evaluate(ENCODE_ALL, [[fits, None], [over, None], ["a " * 300, "b " * 209], ["a " * 300, "b " * 210]])
    assert len(out[0]["ids"]) == 512 and out[0]["ids"] == hf(fits)["input_ids"]
    assert out[1]["error"] == ("Error: the text is 600 tokens long with [CLS] and [SEP]; "
                               "the model reads at most 512: shorten it")
    assert len(out[2]["ids"]) == 512 and out[2]["sentenceBStart"] == 302
    assert "513 tokens long" in out[3]["error"] and "at most 512" in out[3]["error"]


def test_sentence_b_start_is_the_first_token_of_type_one(page):
    out = page.page.evaluate(ENCODE_ALL, [[a, b] for a, b in PAIRS] + [["solo", None]])
    for (a, b), enc in zip(PAIRS, out):
        assert enc["sentenceBStart"] == enc["typeIds"].index(1), (a, b)
        assert enc["tokens"][enc["sentenceBStart"] - 1] == "[SEP]" and enc["tokens"][-1] == "[SEP]"
    assert out[-1]["sentenceBStart"] is None and set(out[-1]["typeIds"]) == {0}


def test_worker_with_import_scripts_gives_the_same_tokens(page):
    worker = """async (text) => {
      const src = "importScripts('" + new URL('wordpiece.js', location.href).href + "');" +
        "onmessage = (e) => { const t = AttnlibWordPiece.fromVocab(e.data.vocab);" +
        " postMessage(t.encode(e.data.a, e.data.b)); };";
      const w = new Worker(URL.createObjectURL(new Blob([src], {type: 'text/javascript'})));
      const got = await new Promise((ok, fail) => { w.onmessage = (e) => ok(e.data); w.onerror = fail;
        w.postMessage({vocab: window.vocabText, a: text, b: 'Ångström 中文'}); });
      w.terminate();
      return [got, tok.encode(text, 'Ångström 中文')]; }"""
    in_worker, in_page = page.page.evaluate(worker, corpus.RUNNING)
    assert in_worker == in_page and in_page["tokens"][1:4] == ["the", "cat", "sat"]
