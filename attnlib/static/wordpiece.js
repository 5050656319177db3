/* attnlib WordPiece: the BERT tokenizer of sentence-transformers/all-MiniLM-L6-v2 in plain
 * JavaScript (ES5 syntax, no modules, no libraries, no network; needs String.prototype.normalize).
 * Load it with <script src="wordpiece.js"> or importScripts("wordpiece.js"): it defines one
 * global, AttnlibWordPiece.
 *
 *   var tok = AttnlibWordPiece.fromVocab(vocabText, options);  // vocab.txt: id = line number
 *   tok.encode(textA, textB)  // textB optional (null / undefined: one sentence)
 *     -> {tokens: [str], ids: [int], typeIds: [int], sentenceBStart: int | null}
 *   tok.normalize(text) -> str;  tok.preTokenize(text) -> [str]  (the first two steps alone)
 *
 * Options (defaults = the model's tokenizer.json / tokenizer_config.json): lowercase: true,
 * stripAccents: null (null follows lowercase), handleChineseChars: true, cleanText: true,
 * unkToken "[UNK]", clsToken "[CLS]", sepToken "[SEP]", maxInputCharsPerWord: 100, maxLength: 512
 * (model_max_length), specialTokens: the added tokens matched in the raw text.
 * encode throws a TypeError when a text is not a string, and an Error when a text gives no
 * token ("type a sentence: the text is empty or only spaces") or the input is longer than
 * maxLength ("the text is 600 tokens long with [CLS] and [SEP]; the model reads at most 512:
 * shorten it").
 *
 * It mirrors Hugging Face `tokenizers` step by step: added tokens ([CLS], [MASK], ...: split
 * out of the raw text first, never normalised), BertNormalizer (clean_text, handle_chinese_chars,
 * strip_accents, lowercase, in that order), BertPreTokenizer, WordPiece ("##",
 * max_input_chars_per_word) and the TemplateProcessing post-processor [CLS] A [SEP] B [SEP].
 * Characters are counted by code point, never by UTF-16 unit.  The Rust crate behind the
 * character classes (unicode_categories) uses Unicode 8.0 tables, so the classes below are
 * its exact sets, not the browser's newer \p{...}: unassigned code points (Cn) and format
 * characters added after Unicode 8.0 are kept, and newer punctuation and marks are letters.
 * tests/test_page_tokenizer.py checks every code point against the Python tokenizer. */
var AttnlibWordPiece = (function () {
  "use strict";

  /* "21-2f,a1" -> [[0x21, 0x2f], [0xa1, 0xa1]]: sorted code point ranges. */
  function ranges(text) {
    return text.split(",").map(function (item) {
      var ends = item.split("-");
      return [parseInt(ends[0], 16), parseInt(ends[ends.length - 1], 16)];
    });
  }

  function inRanges(table, cp) {  // binary search
    var lo = 0, hi = table.length - 1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (cp < table[mid][0]) hi = mid - 1;
      else if (cp > table[mid][1]) lo = mid + 1;
      else return true;
    }
    return false;
  }

  /* clean_text drops U+0000, U+FFFD, controls (Cc but tab, newline and carriage return),
   * private use (Co), lone surrogates (Cs) and the format characters (Cf) of Unicode 8.0. */
  var REMOVED = ranges("0-8,b-c,e-1f,7f-9f,ad,600-605,61c,6dd,70f,180e,200b-200f,202a-202e," +
    "2060-2064,2066-206f,d800-dfff,e000-f8ff,feff,fff9-fffb,fffd,110bd,1bca0-1bca3,1d173-1d17a," +
    "e0001,e0020-e007f,f0000-ffffd,100000-10fffd");
  // Rust's char::is_whitespace (Unicode White_Space); clean_text maps these to " ".
  var WHITESPACE = ranges("9-d,20,85,a0,1680,2000-200a,2028-2029,202f,205f,3000");
  // is_chinese_char of tokenizers/src/normalizers/bert.rs (note 2b920, not Python's 2b820).
  var CJK = ranges("3400-4dbf,4e00-9fff,f900-faff,20000-2a6df,2a700-2b73f,2b740-2b81f," +
    "2b920-2ceaf,2f800-2fa1f");
  // BertPreTokenizer's punctuation: ASCII punctuation or Unicode 8.0 category P*.
  var PUNCT = ranges(
    "21-2f,3a-40,5b-60,7b-7e,a1,a7,ab,b6-b7,bb,bf,37e,387,55a-55f,589-58a,5be,5c0,5c3,5c6,5f3-5f4," +
    "609-60a,60c-60d,61b,61e-61f,66a-66d,6d4,700-70d,7f7-7f9,830-83e,85e,964-965,970,af0,df4,e4f," +
    "e5a-e5b,f04-f12,f14,f3a-f3d,f85,fd0-fd4,fd9-fda,104a-104f,10fb,1360-1368,1400,166d-166e," +
    "169b-169c,16eb-16ed,1735-1736,17d4-17d6,17d8-17da,1800-180a,1944-1945,1a1e-1a1f,1aa0-1aa6," +
    "1aa8-1aad,1b5a-1b60,1bfc-1bff,1c3b-1c3f,1c7e-1c7f,1cc0-1cc7,1cd3,2010-2027,2030-2043," +
    "2045-2051,2053-205e,207d-207e,208d-208e,2308-230b,2329-232a,2768-2775,27c5-27c6,27e6-27ef," +
    "2983-2998,29d8-29db,29fc-29fd,2cf9-2cfc,2cfe-2cff,2d70,2e00-2e2e,2e30-2e42,3001-3003," +
    "3008-3011,3014-301f,3030,303d,30a0,30fb,a4fe-a4ff,a60d-a60f,a673,a67e,a6f2-a6f7,a874-a877," +
    "a8ce-a8cf,a8f8-a8fa,a8fc,a92e-a92f,a95f,a9c1-a9cd,a9de-a9df,aa5c-aa5f,aade-aadf,aaf0-aaf1," +
    "abeb,fd3e-fd3f,fe10-fe19,fe30-fe52,fe54-fe61,fe63,fe68,fe6a-fe6b,ff01-ff03,ff05-ff0a," +
    "ff0c-ff0f,ff1a-ff1b,ff1f-ff20,ff3b-ff3d,ff3f,ff5b,ff5d,ff5f-ff65,10100-10102,1039f,103d0," +
    "1056f,10857,1091f,1093f,10a50-10a58,10a7f,10af0-10af6,10b39-10b3f,10b99-10b9c,11047-1104d," +
    "110bb-110bc,110be-110c1,11140-11143,11174-11175,111c5-111c9,111cd,111db,111dd-111df," +
    "11238-1123d,112a9,114c6,115c1-115d7,11641-11643,1173c-1173e,12470-12474,16a6e-16a6f,16af5," +
    "16b37-16b3b,16b44,1bc9f,1da87-1da8b");
  var NONSPACING_MARK = ranges(
    "300-33f,342,345-36f,483-487,591-5bd,5bf,5c1-5c2,5c4-5c5,5c7,610-61a,64b-65f,670,6d6-6dc," +
    "6df-6e4,6e7-6e8,6ea-6ed,711,730-74a,7a6-7b0,7eb-7f3,816-819,81b-823,825-827,829-82d,859-85b," +
    "8e3-902,93a,93c,941-948,94d,951-957,962-963,981,9bc,9c1-9c4,9cd,9e2-9e3,a01-a02,a3c,a41-a42," +
    "a47-a48,a4b-a4d,a51,a70-a71,a75,a81-a82,abc,ac1-ac5,ac7-ac8,acd,ae2-ae3,b01,b3c,b3f,b41-b44," +
    "b4d,b56,b62-b63,b82,bc0,bcd,c00,c3e-c40,c46-c47,c4a-c4d,c55-c56,c62-c63,c81,cbc,cbf,cc6," +
    "ccc-ccd,ce2-ce3,d01,d41-d44,d4d,d62-d63,dca,dd2-dd4,dd6,e31,e34-e3a,e47-e4e,eb1,eb4-eb9," +
    "ebb-ebc,ec8-ecd,f18-f19,f35,f37,f39,f71-f72,f74,f77,f79-f7e,f80,f82-f84,f86-f87,f8d-f92," +
    "f94-f97,f99-f9c,f9e-fa1,fa3-fa6,fa8-fab,fad-fb8,fba-fbc,fc6,102d-1030,1032-1037,1039-103a," +
    "103d-103e,1058-1059,105e-1060,1071-1074,1082,1085-1086,108d,109d,135d-135f,1712-1714," +
    "1732-1734,1752-1753,1772-1773,17b4-17b5,17b7-17bd,17c6,17c9-17d3,17dd,180b-180d,18a9," +
    "1920-1922,1927-1928,1932,1939-193b,1a17-1a18,1a1b,1a56,1a58-1a5e,1a60,1a62,1a65-1a6c," +
    "1a73-1a7c,1a7f,1ab0-1abd,1b00-1b03,1b34,1b36-1b3a,1b3c,1b42,1b6b-1b73,1b80-1b81,1ba2-1ba5," +
    "1ba8-1ba9,1bab-1bad,1be6,1be8-1be9,1bed,1bef-1bf1,1c2c-1c33,1c36-1c37,1cd0-1cd2,1cd4-1ce0," +
    "1ce2-1ce8,1ced,1cf4,1cf8-1cf9,1dc0-1df5,1dfc-1dff,20d0-20dc,20e1,20e5-20f0,2cef-2cf1,2d7f," +
    "2de0-2dff,302a-302d,3099-309a,a66f,a674-a67d,a69e-a69f,a6f0-a6f1,a802,a806,a80b,a825-a826," +
    "a8c4,a8e0-a8f1,a926-a92d,a947-a951,a980-a982,a9b3,a9b6-a9b9,a9bc,a9e5,aa29-aa2e,aa31-aa32," +
    "aa35-aa36,aa43,aa4c,aa7c,aab0,aab2-aab4,aab7-aab8,aabe-aabf,aac1,aaec-aaed,aaf6,abe5,abe8," +
    "abed,fb1e,fe00-fe0f,fe20-fe2f,101fd,102e0,10376-1037a,10a01-10a03,10a05-10a06,10a0c-10a0f," +
    "10a38-10a3a,10a3f,10ae5-10ae6,11001,11038-11046,1107f-11081,110b3-110b6,110b9-110ba," +
    "11100-11102,11127-1112b,1112d,11130-11134,11173,11180-11181,111b6-111be,111ca-111cc," +
    "1122f-11231,11234,11236-11237,112df,112e3-112ea,11300-11301,1133c,11340,11366-1136c," +
    "11370-11374,114b3-114b8,114ba,114bf-114c0,114c2-114c3,115b2-115b5,115bc-115bd,115bf-115c0," +
    "115dc-115dd,11633-1163a,1163d,1163f-11640,116ab,116ad,116b0-116b5,116b7,1171d-1171f," +
    "11722-11725,11727-1172b,16af0-16af4,16b30-16b36,16f8f-16f92,1bc9d-1bc9e,1d167-1d169," +
    "1d17b-1d182,1d185-1d18b,1d1aa-1d1ad,1d242-1d244,1da00-1da36,1da3b-1da6c,1da75,1da84," +
    "1da9b-1da9f,1daa1-1daaf,1e8d0-1e8d6,e0100-e01ef");

  /* The code points of a string as one-character strings (a surrogate pair stays whole). */
  function codePoints(text) {
    var out = [];
    for (var i = 0; i < text.length; i++) {
      var c = text.charCodeAt(i), d = text.charCodeAt(i + 1);
      if (c >= 0xd800 && c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) out.push(text.substr(i++, 2));
      else out.push(text.charAt(i));
    }
    return out;
  }

  function cpOf(ch) {
    var c = ch.charCodeAt(0);
    return ch.length === 2 ? (c - 0xd800) * 0x400 + ch.charCodeAt(1) - 0xdc00 + 0x10000 : c;
  }

  function has(object, key) { return Object.prototype.hasOwnProperty.call(object, key); }

  function checkString(name, value) {
    if (typeof value !== "string") {
      throw new TypeError(name + " must be a string such as \"The cat sat.\", got " +
                          (value === null ? "null" : Array.isArray(value) ? "an array" : typeof value));
    }
  }

  function WordPiece(vocab, options) {
    this.vocab = vocab;  // token -> id (a prototype-free object)
    this.options = options;
  }

  /* BertNormalizer.  Each step works on code points, in the Rust order. */
  WordPiece.prototype.normalize = function (text) {
    var o = this.options, chars = codePoints(text), out = [], i;
    for (i = 0; i < chars.length; i++) {
      var ch = chars[i], cp = cpOf(ch);
      // 1. clean_text: drop NUL, U+FFFD and control / format / private-use characters, and
      //    turn every whitespace character (tab, newline, no-break space, ...) into " ".
      if (o.cleanText && inRanges(REMOVED, cp)) continue;
      if (o.cleanText && inRanges(WHITESPACE, cp)) ch = " ";
      // 2. handle_chinese_chars: a space on each side of a CJK ideograph.
      if (o.handleChineseChars && inRanges(CJK, cp)) out.push(" ", ch, " ");
      else out.push(ch);
    }
    // 3. strip_accents (null: follow lowercase): NFD, then drop the nonspacing marks (Mn).
    var strip = o.stripAccents === null ? o.lowercase : o.stripAccents;
    if (strip) {
      chars = codePoints(out.join("").normalize("NFD"));
      out = [];
      for (i = 0; i < chars.length; i++) {
        if (!inRanges(NONSPACING_MARK, cpOf(chars[i]))) out.push(chars[i]);
      }
    }
    // 4. lowercase, one code point at a time like Rust's char::to_lowercase (so no final-sigma
    //    rule: "ΑΣ" -> "ασ", where String.prototype.toLowerCase gives "ας").
    if (o.lowercase) out = out.map(function (ch) { return ch.toLowerCase(); });
    return out.join("");
  };

  /* BertPreTokenizer: split on whitespace (dropped), then isolate each punctuation mark. */
  WordPiece.prototype.preTokenize = function (text) {
    var chars = codePoints(text), words = [], word = "";
    for (var i = 0; i < chars.length; i++) {
      var cp = cpOf(chars[i]);
      if (inRanges(WHITESPACE, cp) || inRanges(PUNCT, cp)) {
        if (word) words.push(word);
        word = "";
        if (!inRanges(WHITESPACE, cp)) words.push(chars[i]);
      } else {
        word += chars[i];
      }
    }
    if (word) words.push(word);
    return words;
  };

  /* WordPiece model: greedy longest match first; pieces after the first carry "##".  A word
   * longer than maxInputCharsPerWord code points, or with any piece not in the vocabulary,
   * becomes the unknown token as a whole. */
  WordPiece.prototype.wordPieces = function (word) {
    var chars = codePoints(word), unk = [this.options.unkToken], pieces = [], start = 0;
    if (chars.length > this.options.maxInputCharsPerWord) return unk;
    while (start < chars.length) {
      var end = chars.length, found = null;
      for (; end > start; end--) {
        var piece = (start > 0 ? "##" : "") + chars.slice(start, end).join("");
        if (has(this.vocab, piece)) { found = piece; break; }
      }
      if (found === null) return unk;
      pieces.push(found);
      start = end;
    }
    return pieces;
  };

  /* The tokens of one text: added tokens are split out of the raw text first (leftmost,
   * then longest match, as in tokenizers' AddedVocabulary); the text between them is
   * normalised, pre-tokenized and cut into word pieces. */
  WordPiece.prototype.tokenize = function (text) {
    var special = this.options.specialTokens, tokens = [], from = 0, i = 0, self = this;
    function addText(part) {
      self.preTokenize(self.normalize(part)).forEach(function (word) {
        tokens.push.apply(tokens, self.wordPieces(word));
      });
    }
    while (i < text.length) {
      var match = "";
      for (var k = 0; k < special.length; k++) {
        if (special[k].length > match.length && text.substr(i, special[k].length) === special[k]) match = special[k];
      }
      if (!match) { i++; continue; }
      addText(text.slice(from, i));
      tokens.push(match);
      i += match.length;
      from = i;
    }
    addText(text.slice(from));
    return tokens;
  };

  /* [CLS] A [SEP] (B [SEP]), with token type 0 for [CLS] A [SEP] and 1 for B [SEP]. */
  WordPiece.prototype.encode = function (textA, textB) {
    var o = this.options, pair = textB !== undefined && textB !== null;
    checkString("text A", textA);
    if (pair) checkString("text B", textB);
    var a = this.tokenize(textA), b = pair ? this.tokenize(textB) : [];
    if (a.length === 0) throw new Error("type a sentence: the text is empty or only spaces");
    if (pair && b.length === 0) {
      throw new Error("type a second sentence: text B is empty or only spaces");
    }
    var tokens = [o.clsToken].concat(a, [o.sepToken]), typeIds = tokens.map(function () { return 0; });
    if (pair) {
      tokens = tokens.concat(b, [o.sepToken]);
      for (var i = 0; i <= b.length; i++) typeIds.push(1);
    }
    if (tokens.length > o.maxLength) {
      throw new Error((pair ? "the two texts are " : "the text is ") + tokens.length +
                      " tokens long with [CLS] and " + (pair ? "two [SEP]" : "[SEP]") +
                      "; the model reads at most " + o.maxLength + ": shorten " + (pair ? "them" : "it"));
    }
    var vocab = this.vocab;
    return {tokens: tokens, ids: tokens.map(function (t) { return vocab[t]; }), typeIds: typeIds,
            sentenceBStart: pair ? a.length + 2 : null};
  };

  var DEFAULTS = {lowercase: true, stripAccents: null, handleChineseChars: true, cleanText: true,
                  unkToken: "[UNK]", clsToken: "[CLS]", sepToken: "[SEP]", maxInputCharsPerWord: 100,
                  maxLength: 512, specialTokens: Object.freeze(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])};
  Object.freeze(DEFAULTS);

  /* vocab.txt's text (one token a line, id = line number) and options -> a tokenizer. */
  function fromVocab(vocabText, options) {
    if (typeof vocabText !== "string") {
      throw new TypeError("vocabText must be the text of vocab.txt (a string), got " + typeof vocabText);
    }
    var o = {}, key;
    for (key in DEFAULTS) if (has(DEFAULTS, key)) o[key] = DEFAULTS[key];
    for (key in options || {}) {
      if (!has(options, key)) continue;
      if (!has(DEFAULTS, key)) {
        throw new Error("unknown option " + JSON.stringify(key) + "; expected one of " + Object.keys(DEFAULTS).join(", "));
      }
      o[key] = options[key];
    }
    var lines = vocabText.split("\n"), vocab = Object.create(null);
    if (lines[lines.length - 1] === "") lines.pop();  // the final newline ends the last line
    lines.forEach(function (line, id) {
      line = line.replace(/\r$/, "");
      if (!(line in vocab)) vocab[line] = id;
    });
    [o.unkToken, o.clsToken, o.sepToken].concat(o.specialTokens).forEach(function (t) {
      if (!(t in vocab)) throw new Error("the vocabulary has no " + t + " token: pass the model's vocab.txt");
    });
    return new WordPiece(vocab, o);
  }

  return {fromVocab: fromVocab, defaults: DEFAULTS};
})();
