"""The page's tokenizer (attnlib/static/bpe.js, which the language model's worker loads) against
the kernel's (attnlib.language_model.tokenizer, Hugging Face tokenizers) on a large real text,
every chapter of the book, the preface and the README, and on hostile text (special tokens,
emoji, scripts, control characters, runs of spaces).  The page's JavaScript runs in node, on
the tokenizer description the build writes (attnlib.lm_export.tokenizer_spec)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from attnlib import language_model as lm
from attnlib import lm_export

from test_edits_mirror import _node

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["", " ", "  hello  world  ", "\n\n\tTabs\r\nCRLF", "naïve café résumé", "日本語のテキスト", "emoji 👩‍💻🚀 mix",
           "<|endoftext|>x<|im_start|>user", "<|im_end|><|im_end|>", "numbers 12345 3.14159 1,000,000",
           "it's we're they've I'm you'll he'd", "'S 'T 'LL", "\u00a0nbsp\u2009thin\u3000ideo", "a" * 300,
           "Ωmega ∑ ∞ ≠", "\x00\x01ctrl", "  \n  ", "x\u200by", "\U0001F600 smile", "</script><b>", "A\u0301 combining"]
SCRIPT = r'''
const B = require(process.argv[2]); const fs = require("fs");
const tok = new B.Tokenizer(JSON.parse(fs.readFileSync(process.argv[3], "utf8")));
const cases = JSON.parse(fs.readFileSync(process.argv[4], "utf8"));
process.stdout.write(JSON.stringify(cases.map(t => { try { return tok.encode(t); } catch (e) { return "error: " + e.message; } })));
'''


def test_the_page_tokenizer_gives_the_kernels_ids_on_the_book_and_hostile_text(tmp_path):
    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "chapters").glob("*.md"))]
    texts += [(ROOT / name).read_text(encoding="utf-8") for name in ("intro.md", "README.md")]
    cases = texts + HOSTILE
    (tmp_path / "spec.json").write_text(json.dumps(lm_export.tokenizer_spec(), ensure_ascii=False), encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "run.js").write_text(SCRIPT, encoding="utf-8")
    out = subprocess.run([_node(), str(tmp_path / "run.js"), str(ROOT / "attnlib" / "static" / "bpe.js"),
                          str(tmp_path / "spec.json"), str(tmp_path / "cases.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    tok = lm.tokenizer()
    want = [tok.encode(t) for t in cases]
    assert sum(len(w) for w in want[:len(texts)]) > 200_000          # a large real text
    for text, g, w in zip(cases, got, want):
        assert g == w, (text[:60], next((i, g[i:i + 3], w[i:i + 3]) for i in range(min(len(g), len(w)) + 1)
                                        if i == min(len(g), len(w)) or g[i] != w[i]))
