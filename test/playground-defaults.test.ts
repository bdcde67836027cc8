// The playground's first impression (issue 47, finding 8): its defaults are what the served model was trained on.
// wordnet-chat's system prompt is one of its corpus' (the old default was one it never saw), and the page suggests
// the question it was trained to answer, which it answers in the dictionary form it learnt (at 1.3 M parameters the
// word it defines is often one of its own invention: docs/models.md's model card).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { SYSTEM_PROMPTS } from '../scripts/wordnet/chat-corpus.js';
import { collect, loadEngine } from './helpers/engines.js';

const page = readFileSync(fileURLToPath(new URL('../src/worker/playground/index.html', import.meta.url)), 'utf8');
const defaults = /'wordnet-chat': \{ system: '([^']+)', placeholder: '([^']+)' \}/.exec(page);

it("the page's defaults for wordnet-chat are its corpus' own; no system prompt is preset for other models", () => {
  expect(defaults, 'the page names defaults for wordnet-chat').not.toBeNull();
  expect(SYSTEM_PROMPTS).toContain(defaults![1]);
  expect(page).toMatch(/<textarea id="system"[^>]*><\/textarea>/);
});

it('with them, wordnet-chat answers the suggested question in dictionary form', async () => {
  const question = /(What does \w+ mean\?)/.exec(defaults![2])![1];
  const engine = await loadEngine('kernels', 'wordnet-chat');
  try {
    const { done } = await collect(engine, {
      messages: [
        { role: 'system', content: defaults![1] },
        { role: 'user', content: question },
      ],
      max_tokens: 32,
      temperature: 0,
    });
    const text = done.text;
    console.log(`playground defaults: ${JSON.stringify(question)} -> ${JSON.stringify(text)}`);
    expect(text).toMatch(/^[A-Z][\w' -]* \((noun|verb|adjective|adverb)\): [A-Z]/);
  } finally {
    await engine.runner.release();
  }
});
