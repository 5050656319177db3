/* The language model's tokenizer on the page: byte-level BPE (Radford et al. 2019, GPT-2; the
 * model's own vocabulary and merges, tokenizer.json written at build by attnlib.lm_export), equal
 * to the kernel's (attnlib.language_model.tokenizer, Hugging Face tokenizers) on the chapters'
 * text and on hostile text (tests/test_lm_page.py runs both in node).
 *
 * The steps, as Hugging Face's ByteLevel pre-tokenizer and BPE model do them:
 *  1. the special tokens (<|endoftext|>, <|im_start|>, ...) are cut out of the text first and
 *     become their own ids;
 *  2. the rest is split by GPT-2's pattern (contractions, letters, digits, other symbols, each
 *     with at most one leading space; runs of spaces);
 *  3. each piece's UTF-8 bytes become printable characters (GPT-2's byte-to-unicode table,
 *     so a space is "\u0120"), and the pair of neighbours with the lowest merge rank is merged
 *     until no pair has a rank; each resulting symbol is one token of the vocabulary.
 * No BOS is added: the model reads text as is (the file's add_bos_token is false).
 *
 * Loaded by the language model's worker with importScripts (a global attnlibBPE) and by node
 * (module.exports). */
"use strict";
var attnlibBPE = (function () {
  var PATTERN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

  function byteTable() {                     /* GPT-2's bytes_to_unicode: byte -> one character */
    var bs = [], i, n = 0, table = new Array(256);
    for (i = 33; i <= 126; i++) bs.push(i);
    for (i = 161; i <= 172; i++) bs.push(i);
    for (i = 174; i <= 255; i++) bs.push(i);
    var printable = {};
    bs.forEach(function (b) { printable[b] = true; table[b] = String.fromCharCode(b); });
    for (i = 0; i < 256; i++) if (!printable[i]) table[i] = String.fromCharCode(256 + n++);
    return table;
  }

  /* tokenizer.json's {vocab: {symbol: id}, merges: [[a, b] or "a b"], added_tokens: [{id, content}]} */
  function Tokenizer(spec) {
    if (!spec || typeof spec.vocab !== "object" || !Array.isArray(spec.merges)) {
      throw new Error("the tokenizer's description is damaged (no vocab or merges)");
    }
    this.vocab = spec.vocab;
    this.ranks = new Map();
    var self = this;
    spec.merges.forEach(function (m, i) {
      var pair = Array.isArray(m) ? m : String(m).split(" ");
      self.ranks.set(pair[0] + " " + pair[1], i);
    });
    this.special = (spec.added_tokens || []).map(function (t) { return {id: t.id, content: t.content}; })
      .sort(function (a, b) { return b.content.length - a.content.length; });
    this.bytes = byteTable();
    this.symbols = {};
    Object.keys(this.vocab).forEach(function (s) { self.symbols[self.vocab[s]] = s; });
    this.cache = new Map();
    this.encoder = new TextEncoder();
  }

  Tokenizer.prototype.bpe = function (piece) {
    var hit = this.cache.get(piece);
    if (hit) return hit;
    var utf8 = this.encoder.encode(piece), word = [], i;
    for (i = 0; i < utf8.length; i++) word.push(this.bytes[utf8[i]]);
    while (word.length > 1) {
      var best = -1, bestRank = Infinity;
      for (i = 0; i < word.length - 1; i++) {
        var r = this.ranks.get(word[i] + " " + word[i + 1]);
        if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
      }
      if (best < 0) break;
      var a = word[best], b = word[best + 1], merged = [];
      for (i = 0; i < word.length; i++) {          /* every occurrence of the pair, left to right */
        if (i < word.length - 1 && word[i] === a && word[i + 1] === b) { merged.push(a + b); i++; }
        else merged.push(word[i]);
      }
      word = merged;
    }
    var ids = word.map(function (s) {
      var id = this.vocab[s];
      if (id === undefined) throw new Error("the tokenizer has no token for " + JSON.stringify(s));
      return id;
    }, this);
    if (this.cache.size < 50000) this.cache.set(piece, ids);
    return ids;
  };

  Tokenizer.prototype.encodeOrdinary = function (text, out) {
    var pieces = text.match(PATTERN) || [];
    for (var i = 0; i < pieces.length; i++) Array.prototype.push.apply(out, this.bpe(pieces[i]));
  };

  /* text -> token ids (numbers) */
  Tokenizer.prototype.encode = function (text) {
    if (typeof text !== "string") throw new Error("expected text (a string), got " + (text === null ? "null" : typeof text));
    var out = [], rest = text;
    while (rest.length) {
      var at = -1, found = null;
      for (var i = 0; i < this.special.length; i++) {
        var k = rest.indexOf(this.special[i].content);
        if (k >= 0 && (at < 0 || k < at)) { at = k; found = this.special[i]; }
      }
      if (at < 0) { this.encodeOrdinary(rest, out); break; }
      this.encodeOrdinary(rest.slice(0, at), out);
      out.push(found.id);
      rest = rest.slice(at + found.content.length);
    }
    return out;
  };

  /* a token id -> its text (the bytes it stands for, decoded; a special token's content) */
  Tokenizer.prototype.token = function (id) {
    var s = this.symbols[id];
    if (s === undefined) throw new Error("no token has the id " + id);
    if (!this.inverse) {
      this.inverse = {};
      for (var b = 0; b < 256; b++) this.inverse[this.bytes[b]] = b;
    }
    var bytes = [];
    for (var i = 0; i < s.length; i++) {
      var byte = this.inverse[s[i]];
      if (byte === undefined) return s;               /* a special token: shown as it is */
      bytes.push(byte);
    }
    return new TextDecoder("utf-8", {fatal: false}).decode(new Uint8Array(bytes));
  };

  return {Tokenizer: Tokenizer};
})();
if (typeof module !== "undefined" && module.exports) module.exports = attnlibBPE;
