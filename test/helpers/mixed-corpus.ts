// A mixed corpus for tokenizer comparisons: English prose, code, CJK, emoji, whitespace runs, numbers,
// contractions, special-token strings typed in text, and the corners where tokenizers part (NFC, U+FEFF,
// a typed ▁, byte fallback, lone surrogates excluded: they are no valid UTF-8).
import { readCorpus } from '../../scripts/tokenizer/build-tokenizer.js';

export const MIXED_CORPUS: readonly string[] = [
  'Hello, world! The quick brown fox jumps over the lazy dog.',
  "I've been told he's there; they'll say we'd known. YOU'RE sure? 'M not. We'Ve a'lL",
  "It's 14:35 and the train costs $12.50 (8.25% tax). Don't run! 3.14159 1,000,000 007 12345678901234",
  'Français : « Ça va ? » — très bien, merci. Straße, Übermorgen, niño, Łódź, ďábelské.',
  'Ελληνικά: Καλημέρα! Русский: Доброе утро. Українська. עברית. العربية. हिन्दी. ไทย.',
  '中文：今天天气很好。我想在apple工作1314151天～ 日本語：ありがとうございます。カタカナ。한국어: 감사합니다.',
  'Emoji 😀🤖👩‍💻🇯🇵 🦙🦙 😶‍🌫️ ✅ and symbols ∑ ∞ ≈ → ✓ \u{1F9EC} �',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: deliberate: source code holding a template literal
  'function f(x: number): string {\n\treturn `${x * 2}`;\n}\n\n\n   indented   spaces  ',
  'def fib(n):\n    if n < 2:\n        return n  # base case\n    return fib(n - 1) + fib(n - 2)\n',
  '<div class="a"><table><tr><td>1</td></tr></table></div> // comment /* block */ #include <stdio.h>',
  '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n"}}',
  ' ',
  '  ',
  `${' '.repeat(40)}forty spaces`,
  '\n',
  '\n\n\n\n',
  '\t\t\ttabs\t and\ttabs',
  ' \n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n',
  'trailing spaces   ',
  '   leading spaces',
  'CRLF\r\nline\r\n\r\nend\r',
  "------======= ''''''```````\"\"\"\"......!!!!!!??????",
  'Cafe\u0301 vs Café, ﬁ ligature, Å vs Å, ｆｕｌｌｗｉｄｔｈ',
  '\uFEFFleading BOM, NUL \u0000 and control \u0007 chars',
  'a typed ▁ and ▁▁ next to  spaces ▁ ▁',
  'specials typed: <|im_start|>user\nhi<|im_end|> <|endoftext|> <think>ok</think> <tool_call>{}</tool_call>',
  'gemma turns: <start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n<bos><eos><pad> <unused0> <mask>',
  'ကောင်းသောနေ့ ⵣ ꦄ 𓀀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ᐃᓄᒃᑎᑐᑦ',
  '',
  readCorpus(),
  ...readCorpus()
    .split('\n')
    .filter((line) => line.length > 0)
    .slice(0, 40),
];
