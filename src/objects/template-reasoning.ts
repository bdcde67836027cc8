/**
 * How a model's chat template marks reasoning: its tags (read from the tokenizer's added tokens), whether it
 * drops earlier answers' reasoning from the prompt (probed once per engine), the format of one prompt's answer,
 * and the tokens an answer spent reasoning. For responses and chat completions alike.
 */
import type { Engine } from '../engine/engine.js';
import type { GenerationRequest } from '../engine/request.js';
import { reasoningFormat, ReasoningSplitter, reasoningTags, type ReasoningFormat } from '../responses/reasoning.js';

/** Per engine: the template's reasoning tags, and whether it drops earlier answers' reasoning from the prompt. */
interface TemplateReasoning {
  tags: { begin: string; end: string } | undefined;
  dropsReasoning: boolean;
}
const templateReasoning = new WeakMap<Engine, TemplateReasoning>();

/** Reasoning tags from the tokenizer's added tokens (`<think>` and `</think>` are tokens of models that reason). */
export function reasoningOf(engine: Engine): TemplateReasoning {
  let known = templateReasoning.get(engine);
  if (known) return known;
  const added = engine.tokenizer.addedTokenTexts;
  const tags = reasoningTags(added.join('\n'));
  let dropsReasoning = false;
  if (tags) {
    const probe = 'zq7probe';
    try {
      const ids = engine.resolve({
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: `${tags.begin}\n${probe}\n${tags.end}\n\nb` },
          { role: 'user', content: 'c' },
        ],
        max_tokens: 1,
      }).promptIds;
      dropsReasoning = !engine.tokenizer.decode(ids).includes(probe);
    } catch {
      dropsReasoning = false;
    }
  }
  known = { tags, dropsReasoning };
  templateReasoning.set(engine, known);
  return known;
}

/** The reasoning format of a prompt: its tail says whether the template already opened the tags. */
export function promptReasoning(engine: Engine, promptIds: readonly number[]): ReasoningFormat | undefined {
  const { tags } = reasoningOf(engine);
  return tags && reasoningFormat(tags, engine.tokenizer.decode(promptIds.slice(-16)));
}

/** Tokens spent reasoning: the splitter fed the completion token by token, as the stream was. */
export function reasoningTokens(
  engine: Engine,
  format: ReasoningFormat | undefined,
  tokenIds: readonly number[],
): number {
  if (!format) return 0;
  const splitter = new ReasoningSplitter(format);
  const decoder = new TextDecoder();
  for (const id of tokenIds)
    splitter.push(decoder.decode(engine.tokenizer.tokenBytes(id, { addedTokens: 'text' }), { stream: true }));
  splitter.flush();
  return splitter.reasoningTokens;
}

/**
 * A constrained request to a model that reasons, with its grammar deferred past the reasoning (as vLLM's
 * reasoning parsers do): a JSON schema or a forced tool call shapes the answer, and the model still thinks
 * first. Requests without a constraint, and models without tags, are returned as they are.
 */
export function constrainAfterReasoning(engine: Engine, request: GenerationRequest): GenerationRequest {
  const { tags } = reasoningOf(engine);
  if (!request.constraint || !tags || request.constraint.reasoning) return request;
  return { ...request, constraint: { ...request.constraint, reasoning: tags } };
}
